package progress_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/progress"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time        { return c.t }
func (c *fakeClock) add(d time.Duration)   { c.t = c.t.Add(d) }
func newClock() *fakeClock                 { return &fakeClock{t: time.Unix(1_000_000, 0)} }
func approx(got, want float64) bool        { return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want)) }
func lines(s string) []string              { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }
func unsetEventsFD(t *testing.T)           { t.Setenv(event.EnvFD, ""); os.Unsetenv(event.EnvFD) }
func plainWidth(t *testing.T, text string) { t.Helper(); checkWidth(t, text, 80) }
func checkWidth(t *testing.T, text string, w int) {
	t.Helper()
	for _, l := range lines(text) {
		if len(l) >= w {
			t.Errorf("line %q is %d columns; want fewer than %d", l, len(l), w)
		}
	}
}

// TestRateLeavesOutTheFirstStep: the first step's time holds the
// start-up (here 10 s of it), so it gives no rate; from the second step
// on the rate is the samples after the first over the time since its
// end, and the ETA is the run's steps left at the time per step since
// the first step's end.
func TestRateLeavesOutTheFirstStep(t *testing.T) {
	clock := newClock()
	events := captureEvents(t, func(rep *progress.Reporter) {
		rep.Steps(0, 10)
		bar := rep.Epoch(0, 2, 5)
		clock.add(10 * time.Second)
		bar.Step(64)
		clock.add(500 * time.Millisecond)
		bar.Step(64)
		clock.add(500 * time.Millisecond)
		bar.Step(64)
		bar.Done()
	}, clock)
	var steps []event.Event
	for _, ev := range events {
		if ev.Kind == event.KindStep || ev.Kind == event.KindDone {
			steps = append(steps, ev)
		}
	}
	if len(steps) != 4 { // each step 0.5 s after the last: every one is sent
		t.Fatalf("events %+v; want 3 steps and done", steps)
	}
	if first := steps[0]; first.Rate != 0 || first.ETA != 0 || first.RunStep != 1 || first.RunSteps != 10 {
		t.Errorf("first step %+v: want no rate, no ETA, step 1 of 10", first)
	}
	if second := steps[1]; !approx(second.Rate, 128) || !approx(second.ETA, 4) || second.RunStep != 2 {
		t.Errorf("second step: rate %v, ETA %v, step %d; want 64 samples in 0.5 s = 128/s, 8 steps × 0.5 s = 4 s, step 2",
			second.Rate, second.ETA, second.RunStep)
	}
	if done := steps[3]; !approx(done.Rate, 128) || !approx(done.ETA, 3.5) || done.RunStep != 3 {
		t.Errorf("done %+v: want 128/s, ETA 3.5 s at step 3", done)
	}
}

// captureEvents runs f on a reporter whose events are decoded, as a
// launcher's pipe would carry them.
func captureEvents(t *testing.T, f func(*progress.Reporter), clock *fakeClock) []event.Event {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Setenv(event.EnvFD, itoa(int(w.Fd())))
	rep := progress.FromEnv(progress.Rank(0), progress.Clock(clock.now))
	if !rep.Launched() {
		t.Fatal("the reporter did not take the pipe")
	}
	done := make(chan []byte)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r)
		done <- b.Bytes()
	}()
	f(rep)
	_ = rep.Close() // closes w
	var events []event.Event
	for _, l := range lines(string(<-done)) {
		var ev event.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("event %q: %v", l, err)
		}
		events = append(events, ev)
	}
	return events
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestIntervalsShowStepsOfTotal reports a run that evaluates every 100
// of 5000 steps, as the GPT does, in plain lines at 80 columns: each
// line names the run's step of its total and the interval as "eval",
// never "epoch"; the ETA is the whole run's; no line is 80 columns or
// wider, even with a rate in the millions.
func TestIntervalsShowStepsOfTotal(t *testing.T) {
	unsetEventsFD(t)
	clock := newClock()
	var out bytes.Buffer
	rep := progress.FromEnv(progress.Output(&out), progress.Rank(0), progress.Clock(clock.now),
		progress.LogEvery(10*time.Second), progress.Tokens())
	rep.Steps(1000, 5000) // resumed at step 1000
	for k := 10; k < 12; k++ {
		bar := rep.Interval(k, 50, 100)
		for range 100 {
			clock.add(time.Second)
			bar.Step(12_345_678, progress.Loss(1.2345))
		}
		clock.add(20 * time.Second) // the evaluation
		bar.Done(progress.Metric("val_loss", 1.3456), progress.Metric("lr", 0.000123))
	}
	_ = rep.Close()
	text := out.String()
	plainWidth(t, text)
	if strings.Contains(text, "epoch") {
		t.Errorf("output names an epoch:\n%s", text)
	}
	ls := lines(text)
	var periodic, ends []string
	for _, l := range ls {
		if strings.HasPrefix(l, "eval ") {
			ends = append(ends, l)
		} else {
			periodic = append(periodic, l)
		}
	}
	if len(ends) != 2 || !strings.HasPrefix(ends[0], "eval 11/50 step 1100/5000: train_loss 1.2345 val_loss 1.3456 lr 0.000123") ||
		!strings.HasPrefix(ends[1], "eval 12/50 step 1200/5000: ") {
		t.Errorf("interval lines %q; want eval 11/50 at step 1100/5000 with its losses and lr, then eval 12/50", ends)
	}
	if len(periodic) < 10 {
		t.Fatalf("periodic lines %q: want one every 10 s", periodic)
	}
	// Step 1050 of 5000, in interval 11: 3950 steps left; the steps since
	// the first took 1 s each (the evaluation is in the mean after one).
	// The share done is left out first to fit 80 columns.
	want := "step 1050/5000 eval 11/50 loss 1.2345 12345678 tokens/s ETA 1:05:50 step 1.00s"
	found := false
	for _, l := range periodic {
		if strings.HasPrefix(l, "step 1050/5000 ") {
			found = true
			if l != want {
				t.Errorf("line %q; want %q", l, want)
			}
		}
	}
	if !found {
		t.Errorf("no line at step 1050 among %q", periodic)
	}
}
