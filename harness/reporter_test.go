package harness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
)

// TestReporterOneCallPerStep trains with a loop of the program's own:
// the one End a step reaches both the progress display (an epoch's line
// each, with its steps, training loss and metric) and the metrics file
// (a row a step, with the learning rate).
func TestReporterOneCallPerStep(t *testing.T) {
	var out bytes.Buffer
	file := filepath.Join(t.TempDir(), "metrics.jsonl")
	r := start(t, harness.Config{Progress: true, Metrics: file}, &out)
	j := newJob(t, r, 32)
	ctx := context.Background()
	loader := j.loop.Data
	rep, err := r.Reporter(harness.Plan{Epochs: 2, StepsPerEpoch: loader.Len(), LR: j.opt.LR})
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for epoch := range 2 {
		j.loop.Sampler.SetEpoch(epoch)
		rep.StartEpoch(epoch)
		for b := range loader.Batches() {
			s, err := rep.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			loss, err := j.Step(ctx, s, b)
			if err != nil {
				t.Fatal(err)
			}
			rep.End(b.Len(), loss)
		}
		ms, _ := j.Evaluate(ctx)
		l, err := rep.EndEpoch(ctx, ms...)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	stats, err := rep.Close()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if stats.Steps != 32 || !(stats.Throughput > 0) || stats.ThroughputFrom != 6 {
		t.Fatalf("stats %+v: want 32 steps, a throughput from step 6", stats)
	}
	rows := readMetrics(t, file)
	if len(rows) != 32 || rows[0].LR != 0.1 || rows[31].Step != 32 || rows[31].Epoch != 2 || rows[0].Samples != 32 {
		t.Fatalf("%d rows, first %+v, last %+v: want 32 rows of 32 samples at lr 0.1, the last step 32 of epoch 2", len(rows), rows[0], rows[len(rows)-1])
	}
	var lines []string
	for l := range strings.Lines(out.String()) {
		if strings.HasPrefix(l, "epoch ") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "epoch 1/2: 16 steps train_loss ") || !strings.HasPrefix(lines[1], "epoch 2/2: 16 steps train_loss ") ||
		!strings.Contains(lines[1], " test_acc ") || !(losses[1] < losses[0]) {
		t.Fatalf("output:\n%s\nlosses %v: want an epoch line each, with its loss and test_acc, the loss falling", out.String(), losses)
	}
}

// readMetrics reads a metrics file's rows.
func readMetrics(t *testing.T, path string) []event.Row {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []event.Row
	for l := range strings.Lines(string(b)) {
		var row event.Row
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("row %q: %v", l, err)
		}
		rows = append(rows, row)
	}
	return rows
}

// TestShortRunThroughput: a run of no more steps than the warm-up is
// measured over its steps after the first, and says so; a run of one
// step over that step. Neither reports 0.
func TestShortRunThroughput(t *testing.T) {
	for _, tc := range []struct {
		steps, from int
		says        string
	}{{3, 2, "throughput measured over steps 2-3"}, {1, 1, "throughput measured over the only step"}} {
		var out bytes.Buffer
		r := start(t, harness.Config{}, &out)
		j := newJob(t, r, 32)
		stats := train(t, j, func(l *harness.Loop) { l.MaxSteps = tc.steps })
		if !(stats.Throughput > 0) || stats.ThroughputFrom != tc.from || !strings.Contains(out.String(), tc.says) {
			t.Errorf("%d steps: throughput %v from step %d; output:\n%s\nwant a rate from step %d and %q",
				tc.steps, stats.Throughput, stats.ThroughputFrom, out.String(), tc.from, tc.says)
		}
		r.Close()
	}
}
