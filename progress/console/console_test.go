package console

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeClock advances by step on every reading.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

// stepEvent is a step's event whose rate is samples over elapsed (as a
// reporter's, whose window leaves out the first step, would be).
func stepEvent(epoch, epochs, steps, step int, samples int64, elapsed, loss, stepTime float64) []byte {
	return fmt.Appendf(nil, `{"kind":"step","epoch":%d,"epochs":%d,"steps":%d,"step":%d,"samples":%d,"elapsed":%g,"rate":%g,"loss":%g,"step_time":%g}`,
		epoch, epochs, steps, step, samples, elapsed, float64(samples)/elapsed, loss, stepTime)
}

func doneEvent(epoch, steps int, samples int64, elapsed, loss float64, metrics string) []byte {
	return fmt.Appendf(nil, `{"kind":"done","epoch":%d,"epochs":2,"steps":%d,"step":%d,"samples":%d,"elapsed":%g,"rate":%g,"loss":%g,"metrics":{%s}}`,
		epoch, steps, steps, samples, elapsed, float64(samples)/elapsed, loss, metrics)
}

// screen replays what a terminal shows for out: '\r' returns to the
// column 0, ESC[K erases to the end of the line, '\n' starts a new line.
func screen(out string) []string {
	lines := []string{""}
	col := 0
	for i := 0; i < len(out); i++ {
		cur := &lines[len(lines)-1]
		switch {
		case out[i] == '\r':
			col = 0
		case out[i] == '\n':
			lines = append(lines, "")
			col = 0
		case strings.HasPrefix(out[i:], "\x1b[K"):
			*cur = (*cur)[:col]
			i += 2
		default:
			if col < len(*cur) {
				*cur = (*cur)[:col] + string(out[i]) + (*cur)[col+1:]
			} else {
				*cur += string(out[i])
			}
			col++
		}
	}
	return lines
}

func TestLiveBarFitsTheWidth(t *testing.T) {
	for _, width := range []int{20, 40, 70, 80, 200} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			var out bytes.Buffer
			clock := &fakeClock{t: time.Unix(0, 0), step: time.Second}
			c := New(Options{Out: &out, Mode: Live, Width: func() int { return width }, Now: clock.now})
			c.Event(0, []byte(`{"kind":"epoch","epoch":1,"epochs":2,"steps":469}`))
			c.Event(0, stepEvent(1, 2, 469, 200, 12800, 2.5, 0.3121, 0.0123))
			c.Event(1, stepEvent(1, 2, 469, 190, 12160, 2.5, 0.3300, 0.0131))
			got := screen(out.String())
			if len(got) != 1 {
				t.Fatalf("screen %q: want the bar alone, on one line", got)
			}
			bar := got[0]
			if len(bar) >= width {
				t.Fatalf("bar %q is %d columns wide; want fewer than %d", bar, len(bar), width)
			}
			if !strings.HasPrefix(bar, "epoch 1/2") {
				t.Fatalf("bar %q does not start with the epoch", bar)
			}
			if width >= 70 {
				// The slowest rank's place (190), the job's rate (5120+4864) and
				// step time (rank 1's), the ranks' mean loss.
				for _, want := range []string{"[", "190/469", "9984 samples/s", "loss 0.3211", "step 13ms r1"} {
					if !strings.Contains(bar, want) {
						t.Errorf("bar %q lacks %q", bar, want)
					}
				}
			}
			if strings.Contains(out.String(), "\n") {
				t.Fatalf("output %q: a live bar is redrawn in place, never with a newline", out.String())
			}
		})
	}
}

func TestLiveLogLineAboveTheBar(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0), step: time.Second}
	c := New(Options{Out: &out, Mode: Live, Width: func() int { return 80 }, Now: clock.now})
	w := c.Writer()
	c.Event(0, []byte(`{"kind":"epoch","epoch":1,"epochs":2,"steps":100}`))
	c.Event(0, stepEvent(1, 2, 100, 10, 640, 1, 0.5, 0.1))
	fmt.Fprint(w, "[rank1]: hello\n[rank0]: a partial")
	fmt.Fprint(w, " line\n")
	fmt.Fprint(w, "[rank0]: own bar 10%\r[rank0]: own bar 20%\r\n")
	got := screen(out.String())
	want := []string{"[rank1]: hello", "[rank0]: a partial line", "[rank0]: own bar 10%", "[rank0]: own bar 20%"}
	if len(got) != len(want)+1 {
		t.Fatalf("screen %q: want the lines %q, then the bar", got, want)
	}
	for i, l := range want {
		if got[i] != l {
			t.Errorf("screen line %d is %q; want %q", i, got[i], l)
		}
	}
	if bar := got[len(got)-1]; !strings.HasPrefix(bar, "epoch 1/2 [") || !strings.Contains(bar, "samples/s") {
		t.Fatalf("last screen line %q is not the bar", bar)
	}

	// The epoch's end replaces the bar with the epoch's line.
	c.Event(0, doneEvent(1, 100, 6400, 10, 0.25, `"test_acc":0.91`))
	got = screen(out.String())
	if last := got[len(got)-2]; !strings.HasPrefix(last, "epoch 1/2: 100 steps train_loss 0.2500 test_acc 0.9100 640 samples/s") {
		t.Fatalf("screen %q: want the epoch's line last", got)
	}
	if got[len(got)-1] != "" {
		t.Fatalf("screen %q: the bar is still shown after the epoch ended", got)
	}
}

func TestPlain(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0), step: time.Second}
	c := New(Options{Out: &out, Mode: Plain, LogEvery: 5 * time.Second, Now: clock.now})
	w := c.Writer()
	c.Event(0, []byte(`{"kind":"epoch","epoch":1,"epochs":2,"steps":100}`))
	c.Event(1, []byte(`{"kind":"epoch","epoch":1,"epochs":2,"steps":100}`))
	for step := 1; step <= 10; step++ { // a second per event: a line every 5
		c.Event(0, stepEvent(1, 2, 100, step, int64(64*step), float64(step), 1/float64(step), 0.01))
	}
	fmt.Fprint(w, "[rank0]: own bar\r")
	c.Event(2, []byte(`{"kind":"unknown","epoch":1}`)) // no rank of the epoch: rank 2 sent no event
	c.Event(0, doneEvent(1, 100, 6400, 10, 0.3, `"test_acc":0.9`))
	c.Event(1, doneEvent(1, 100, 6400, 10, 0.5, ""))
	c.Event(0, []byte("not an event"))
	c.Close()
	text := out.String()
	if strings.Contains(text, "\r") || strings.Contains(text, "\x1b") {
		t.Fatalf("plain output %q has a carriage return or an escape", text)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("plain output:\n%s\nwant 2 periodic lines, the program's line and the epoch's line", text)
	}
	for _, l := range lines[:2] {
		if !strings.HasPrefix(l, "epoch 1/2 ") || !strings.Contains(l, "samples/s") || !strings.Contains(l, "%") {
			t.Errorf("periodic line %q: want the epoch, its share done and samples/s", l)
		}
	}
	if lines[2] != "[rank0]: own bar" {
		t.Errorf("line %q: want the program's line, its '\\r' made a line end", lines[2])
	}
	if want := "epoch 1/2: 100 steps train_loss 0.4000 test_acc 0.9000 1280 samples/s 0:10"; lines[3] != want {
		t.Errorf("epoch line %q; want %q", lines[3], want)
	}
}

func TestFit(t *testing.T) {
	for _, tc := range []struct {
		s     string
		width int
		want  string
	}{
		{"abc", 4, "abc"}, {"abcd", 4, "abc"}, {"abcdef", 4, "abc"}, {"ab", 1, "a"},
	} {
		if got := fit(tc.s, tc.width); got != tc.want {
			t.Errorf("fit(%q, %d) = %q; want %q", tc.s, tc.width, got, tc.want)
		}
	}
}

// TestEpochWaitsForEveryRank: a rank that ends its epoch before another
// has reported at all does not print the epoch's line alone, and a rank
// that never reports holds an epoch back only until the next begins.
func TestEpochWaitsForEveryRank(t *testing.T) {
	var out bytes.Buffer
	c := New(Options{Out: &out, Mode: Plain, Ranks: 2})
	c.Event(1, []byte(`{"kind":"epoch","epoch":1,"epochs":2,"steps":100}`))
	c.Event(1, doneEvent(1, 100, 6400, 10, 0.5, ""))
	if out.Len() != 0 {
		t.Fatalf("rank 1 alone printed %q; want nothing before rank 0 reports", out.String())
	}
	c.Event(0, []byte(`{"kind":"epoch","epoch":1,"epochs":2,"steps":100}`))
	c.Event(0, doneEvent(1, 100, 6400, 10, 0.3, `"test_acc":0.9`))
	if want := "epoch 1/2: 100 steps train_loss 0.4000 test_acc 0.9000 1280 samples/s 0:10\n"; out.String() != want {
		t.Fatalf("both ranks done: %q; want %q", out.String(), want)
	}

	out.Reset()
	c = New(Options{Out: &out, Mode: Plain, Ranks: 2}) // only rank 0 reports
	c.Event(0, []byte(`{"kind":"epoch","epoch":1,"epochs":2,"steps":100}`))
	c.Event(0, doneEvent(1, 100, 6400, 10, 0.3, ""))
	if out.Len() != 0 {
		t.Fatalf("rank 0 alone printed %q before the next epoch", out.String())
	}
	c.Event(0, []byte(`{"kind":"epoch","epoch":2,"epochs":2,"steps":100}`))
	if !strings.HasPrefix(out.String(), "epoch 1/2: 100 steps train_loss 0.3000 ") {
		t.Fatalf("epoch 2 began: %q; want epoch 1's line", out.String())
	}
	c.Event(0, doneEvent(2, 100, 6400, 10, 0.2, ""))
	c.Close()
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 2 ||
		!strings.HasPrefix(lines[1], "epoch 2/2: 100 steps train_loss 0.2000 ") {
		t.Fatalf("after Close: %q; want the last epoch's line too", out.String())
	}
}

// TestLinesFit80Columns: at 80 columns every line the console writes
// fits, the least important fields left out first: an epoch's bar keeps
// its count, loss, rate and the run's ETA; an evaluation interval's bar
// leads with the run's step of its total; an interval's end line keeps
// its losses and learning rate.
func TestLinesFit80Columns(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0), step: time.Second}
	c := New(Options{Out: &out, Mode: Live, Width: func() int { return 80 }, Now: clock.now})
	c.Event(0, []byte(`{"kind":"epoch","epoch":2,"epochs":5,"steps":469,"run_step":469,"run_steps":2345}`))
	c.Event(0, []byte(`{"kind":"step","epoch":2,"epochs":5,"steps":469,"step":77,"rate":25443,"loss":0.1104,"step_time":0.0041,"run_step":546,"run_steps":2345,"eta":63}`))
	bar := screen(out.String())[0]
	for _, want := range []string{"epoch 2/5 [", "] 77/469 ", "loss 0.1104", "25443 samples/s", "ETA 1:03"} {
		if !strings.Contains(bar, want) {
			t.Errorf("epoch bar %q lacks %q", bar, want)
		}
	}
	if len(bar) >= 80 {
		t.Errorf("epoch bar %q is %d columns", bar, len(bar))
	}

	out.Reset()
	c = New(Options{Out: &out, Mode: Live, Width: func() int { return 80 }, Now: clock.now})
	c.Event(0, []byte(`{"kind":"epoch","label":"eval","epoch":13,"epochs":50,"steps":100,"unit":"tokens","run_step":1200,"run_steps":5000}`))
	c.Event(0, []byte(`{"kind":"step","label":"eval","epoch":13,"epochs":50,"steps":100,"step":37,"unit":"tokens","rate":72718235,"loss":1.2345,"step_time":0.112,"run_step":1237,"run_steps":5000,"eta":3725}`))
	bar = screen(out.String())[0]
	if !strings.HasPrefix(bar, "step 1237/5000 [") || !strings.Contains(bar, "eval 13/50") || strings.Contains(bar, "epoch") ||
		!strings.Contains(bar, "72718235 tokens/s") || !strings.Contains(bar, "ETA 1:02:05") || len(bar) >= 80 {
		t.Errorf("interval bar %q (%d columns): want the run's step, eval 13/50, tokens/s and the run's ETA, in fewer than 80 columns", bar, len(bar))
	}
	c.Event(0, []byte(`{"kind":"done","label":"eval","epoch":13,"epochs":50,"steps":100,"step":100,"unit":"tokens","rate":31234,"loss":1.2345,"elapsed":45,"run_step":1300,"run_steps":5000,"metrics":{"val_loss":1.3456,"lr":0.000123,"some_long_metric_name":0.5},"names":["val_loss","lr","some_long_metric_name"]}`))
	got := screen(out.String())
	line := got[len(got)-2]
	if want := "eval 13/50 step 1300/5000: train_loss 1.2345 val_loss 1.3456 lr 0.000123"; !strings.HasPrefix(line, want) || len(line) >= 80 {
		t.Errorf("interval line %q (%d columns); want it to start %q, in fewer than 80 columns", line, len(line), want)
	}
}

// TestRateBeforeEveryRankHasOne: a rank has no rate before its epoch's
// second step; until then the others' mean stands in for it, so the
// job's rate is never a part taken for the whole.
func TestRateBeforeEveryRankHasOne(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0), step: time.Second}
	c := New(Options{Out: &out, Mode: Live, Width: func() int { return 120 }, Now: clock.now})
	c.Event(0, []byte(`{"kind":"step","epoch":2,"epochs":2,"steps":469,"step":5,"rate":1000,"run_step":474,"run_steps":938}`))
	c.Event(1, []byte(`{"kind":"step","epoch":2,"epochs":2,"steps":469,"step":1,"run_step":470,"run_steps":938}`))
	bar := screen(out.String())[0]
	if !strings.Contains(bar, " 1/469 ") || !strings.Contains(bar, "step 470/938") || !strings.Contains(bar, " 2000 samples/s") {
		t.Fatalf("bar %q: want the slowest rank's place (1/469, step 470/938) and 2×1000 samples/s", bar)
	}
}
