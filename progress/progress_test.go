package progress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/progress"
	"github.com/gotrain/gotrain/progress/console"
)

// reportSteps is the loop every test reports: one epoch of three steps
// of 64 samples, losses 0.9, 0.5, 0.1.
func reportSteps(rep *progress.Reporter, metrics ...progress.Field) {
	bar := rep.Epoch(0, 1, 3)
	for _, l := range []float64{0.9, 0.5, 0.1} {
		time.Sleep(time.Millisecond) // a step's work: its time and rate are of something
		bar.Step(64, progress.Loss(l))
	}
	bar.Done(metrics...)
}

var workers = testproc.Workers{
	"report": func() int {
		rep := progress.FromEnv()
		if v, ok := os.LookupEnv(event.EnvFD); ok {
			fmt.Fprintf(os.Stderr, "%s=%s still set after FromEnv\n", event.EnvFD, v)
			return 1
		}
		var metrics []progress.Field
		if os.Getenv("RANK") == "0" {
			metrics = append(metrics, progress.Metric("test_acc", 0.75))
		}
		reportSteps(rep, metrics...)
		if err := rep.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close:", err)
			return 1
		}
		return 0
	},
}

func TestMain(m *testing.M) {
	testproc.Dispatch(workers)
	os.Exit(m.Run())
}

func TestStandalone(t *testing.T) {
	t.Setenv(event.EnvFD, "")
	os.Unsetenv(event.EnvFD)
	var out bytes.Buffer
	rep := progress.FromEnv(progress.Output(&out), progress.Rank(0))
	fmt.Fprintln(rep.Writer(), "a line")
	reportSteps(rep, progress.Metric("test_acc", 0.5))
	rep.Close()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != "a line" || !strings.HasPrefix(lines[1], "epoch 1/1: 3 steps train_loss 0.5000 test_acc 0.5000 ") ||
		!strings.Contains(lines[1], " samples/s ") || strings.Contains(out.String(), "\r") {
		t.Fatalf("output %q: want the line, then the epoch's line with its mean loss, accuracy and samples/s", out.String())
	}

	// Text jobs count tokens.
	out.Reset()
	rep = progress.FromEnv(progress.Output(&out), progress.Rank(0), progress.Tokens())
	reportSteps(rep)
	rep.Close()
	if !strings.Contains(out.String(), " tokens/s ") {
		t.Fatalf("output %q: want tokens/s", out.String())
	}

	// Other ranks leave the display to rank 0.
	out.Reset()
	rep = progress.FromEnv(progress.Output(&out), progress.Rank(1))
	reportSteps(rep)
	rep.Close()
	if out.Len() != 0 {
		t.Fatalf("rank 1 alone wrote %q; want nothing", out.String())
	}
}

func TestStaleEventsFD(t *testing.T) {
	// Descriptor 0 or a file is never taken for the launcher's pipe.
	f, err := os.CreateTemp(t.TempDir(), "notapipe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, v := range []string{"0", fmt.Sprint(f.Fd()), "junk"} {
		t.Setenv(event.EnvFD, v)
		var out bytes.Buffer
		rep := progress.FromEnv(progress.Output(&out), progress.Rank(0))
		reportSteps(rep)
		rep.Close()
		if !strings.Contains(out.String(), "epoch 1/1: 3 steps") {
			t.Errorf("%s=%s: output %q; want the reporter to render itself", event.EnvFD, v, out.String())
		}
		if _, ok := os.LookupEnv(event.EnvFD); ok {
			t.Errorf("%s=%s is still set after FromEnv", event.EnvFD, v)
		}
	}
	if st, err := f.Stat(); err != nil || st.Size() != 0 {
		t.Fatalf("the file named by %s: %v, size %d; want it untouched", event.EnvFD, err, st.Size())
	}
}

func TestUnderLauncher(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	events := map[int][]event.Event{}
	var plain bytes.Buffer
	cons := console.New(console.Options{Out: &plain, Mode: console.Plain, Ranks: 2})
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, err := launch.Run(ctx, launch.Config{
		Program: exe, NProcPerNode: 2, Standalone: true,
		Env:    testproc.Environ("report"),
		Stdout: &out, Stderr: &out,
		Logger: nil,
		Events: func(rank int, line []byte) {
			cons.Event(rank, line)
			var ev event.Event
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Errorf("rank %d sent %q: %v", rank, line, err)
				return
			}
			mu.Lock()
			events[rank] = append(events[rank], ev)
			mu.Unlock()
		},
	})
	if err != nil || code != 0 {
		t.Fatalf("launch.Run: %d, %v; output:\n%s", code, err, out.String())
	}
	for rank := range 2 {
		evs := events[rank]
		if len(evs) < 3 || evs[0].Kind != "epoch" || evs[len(evs)-1].Kind != "done" {
			t.Fatalf("rank %d sent %+v; want epoch, steps, done", rank, evs)
		}
		done := evs[len(evs)-1]
		if done.Rank != rank || done.Epoch != 1 || done.Epochs != 1 || done.Steps != 3 || done.Step != 3 ||
			done.Samples != 192 || done.Loss == nil || *done.Loss != 0.5 || done.Elapsed <= 0 || done.StepTime <= 0 {
			t.Errorf("rank %d's last event %+v; want epoch 1 of 1 done, 3 of 3 steps, 192 samples, mean loss 0.5", rank, done)
		}
		if got := done.Metrics["test_acc"]; (rank == 0) != (got == 0.75) {
			t.Errorf("rank %d's metrics %v", rank, done.Metrics)
		}
	}
	if strings.Contains(out.String(), "epoch") {
		t.Errorf("a worker drew progress on its output:\n%s", out.String())
	}
	if line := plain.String(); !strings.HasPrefix(line, "epoch 1/1: 3 steps train_loss 0.5000 test_acc 0.7500 ") {
		t.Errorf("the console rendered %q; want the epoch's line from both ranks' events", line)
	}
}
