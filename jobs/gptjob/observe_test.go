package gptjob

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/event"
)

// TestRunRecordsMetrics trains alone with a metrics file of one row per 3
// steps and a trace: each row covers 3 steps of BatchSize × BlockSize
// tokens, and the timeline holds every step's phases, both evaluations
// and the checkpoint saves.
func TestRunRecordsMetrics(t *testing.T) {
	dir := t.TempDir()
	cfg := tiny() // 12 steps, an evaluation every 6, batches of 4 windows of 16 bytes
	cfg.Metrics, cfg.Trace, cfg.MetricsEvery = filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "t.json"), 3
	cfg.Save, cfg.SaveEvery = filepath.Join(dir, "gpt.safetensors"), 4
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(cfg.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []event.Row
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r event.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("row %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows of 12 steps, one per 3: want 4", len(rows))
	}
	for i, r := range rows {
		if r.Step != 3*(i+1) || r.Steps != 3 || r.Samples != 3*4*16 || r.Epoch != 1 || !(r.Loss > 1 && r.Loss < 6) || r.LR <= 0 || r.SamplesPerSec <= 0 {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
	b, err := os.ReadFile(cfg.Trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []event.TraceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("trace: %v", err)
	}
	count := map[string]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			count[e.Name]++
		}
	}
	// Saves at steps 4 and 8 and at the end; evaluations at 6 and 12.
	if count["forward"] != 12 || count["backward"] != 12 || count["optimizer"] != 12 || count["data"] != 12 ||
		count["evaluate"] != 2 || count["checkpoint"] != 3 {
		t.Fatalf("spans: %v", count)
	}
}

func TestBadMetricsEvery(t *testing.T) {
	cfg := tiny()
	cfg.MetricsEvery = -1
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "MetricsEvery -1") {
		t.Fatalf("err = %v, want one naming MetricsEvery -1", err)
	}
}
