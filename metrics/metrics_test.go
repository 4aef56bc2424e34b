package metrics_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/metrics"
)

// TestRowsAndTrace runs a loop of known phase lengths alone and checks
// the rows' schema and sums, Every's means and the timeline's spans.
func TestRowsAndTrace(t *testing.T) {
	dir := t.TempDir()
	file, trace := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "t.json")
	rec, err := metrics.New(metrics.Config{File: file, Trace: trace, Every: 2})
	if err != nil {
		t.Fatal(err)
	}
	// The steps cover the loop: from StartEpoch to the last End, which
	// happen between these times.
	var beforeStart, afterStart, beforeEnd, afterEnd time.Time
	beforeStart = time.Now()
	rec.StartEpoch(0)
	afterStart = time.Now()
	// The sleeps are the phases' work: the rows must show at least them.
	for i := 0; i < 5; i++ {
		time.Sleep(time.Millisecond) // data
		st := rec.Begin()
		time.Sleep(2 * time.Millisecond)
		st.Forwarded()
		time.Sleep(3 * time.Millisecond)
		st.Backwarded()
		time.Sleep(time.Millisecond)
		beforeEnd = time.Now()
		if err := st.End(8, float64(i), 0.1); err != nil {
			t.Fatal(err)
		}
		afterEnd = time.Now()
	}
	now := time.Now()
	rec.Span("checkpoint", now, now.Add(time.Millisecond))
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []event.Row
	var total float64
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r event.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("row %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
		total += r.StepMS * float64(r.Steps)
	}
	if len(rows) != 3 || rows[0].Steps != 2 || rows[2].Steps != 1 || rows[2].Step != 5 || rows[1].Epoch != 1 {
		t.Fatalf("rows %+v", rows)
	}
	r := rows[0]
	if r.Loss != 0.5 || r.Samples != 16 || r.LR != 0.1 || r.ForwardMS < 2 || r.BackwardMS < 3 || r.OptimizerMS < 1 || r.DataMS < 1 {
		t.Errorf("first row %+v", r)
	}
	if sum := r.DataMS + r.ForwardMS + r.BackwardMS + r.OptimizerMS; sum < r.StepMS*0.999 || sum > r.StepMS*1.001 {
		t.Errorf("phases add to %.3f ms, step %.3f ms", sum, r.StepMS)
	}
	if want := float64(r.Samples) / (r.StepMS * float64(r.Steps) / 1e3); r.SamplesPerSec < want*0.99 || r.SamplesPerSec > want*1.01 {
		t.Errorf("samples/s %.1f, want %.1f", r.SamplesPerSec, want)
	}
	if lo, hi := ms(beforeEnd.Sub(afterStart)), ms(afterEnd.Sub(beforeStart)); total < lo-0.001 || total > hi+0.001 {
		t.Errorf("steps total %.3f ms, want the loop's %.3f to %.3f ms", total, lo, hi)
	}

	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct{ TraceEvents []event.TraceEvent }
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("trace: %v\n%s", err, b)
	}
	count := map[string]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			count[e.Name]++
		}
	}
	for _, name := range []string{"data", "forward", "backward", "optimizer"} {
		if count[name] != 5 {
			t.Errorf("%d %s spans, want 5 (%v)", count[name], name, count)
		}
	}
	if count["checkpoint"] != 1 || count["step 5"] != 1 {
		t.Errorf("spans %v", count)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// TestBadFile is one clear error.
func TestBadFile(t *testing.T) {
	_, err := metrics.New(metrics.Config{File: filepath.Join(t.TempDir(), "no", "such", "m.jsonl")})
	if err == nil {
		t.Fatal("no error for a file in a missing directory")
	}
}
