package metrics_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/metrics"
)

// TestNonFiniteLossRows writes a step whose loss is NaN, a step whose
// loss is infinite, and a row of two steps one of which is NaN, each with
// "loss":null, which reads back as NaN; finite steps keep their loss.
// Token rows say so.
func TestNonFiniteLossRows(t *testing.T) {
	for _, tc := range []struct {
		every  int
		losses []float64
		want   []float64 // NaN: null
	}{
		{1, []float64{2.5, math.NaN(), math.Inf(1), 1.5}, []float64{2.5, math.NaN(), math.NaN(), 1.5}},
		{2, []float64{2.5, math.NaN(), 1, 3}, []float64{math.NaN(), 2}},
	} {
		file := filepath.Join(t.TempDir(), "m.jsonl")
		rec, err := metrics.New(metrics.Config{File: file, Every: tc.every, Tokens: true})
		if err != nil {
			t.Fatal(err)
		}
		rec.StartEpoch(0)
		for _, loss := range tc.losses {
			if err := rec.Begin().End(8, loss, 0.1); err != nil {
				t.Fatalf("End(loss %v): %v", loss, err)
			}
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != len(tc.want) {
			t.Fatalf("every %d: %d rows, want %d:\n%s", tc.every, len(lines), len(tc.want), b)
		}
		for i, line := range lines {
			var row event.Row
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("row %q: %v", line, err)
			}
			want := tc.want[i]
			null := strings.Contains(line, `"loss":null`)
			switch {
			case math.IsNaN(want) && (!null || !math.IsNaN(row.Loss)):
				t.Errorf("every %d, row %d: %s; want \"loss\":null, read as NaN (got %v)", tc.every, i, line, row.Loss)
			case !math.IsNaN(want) && (null || row.Loss != want):
				t.Errorf("every %d, row %d: loss %v, want %v", tc.every, i, row.Loss, want)
			}
			if row.Unit != "tokens" || bytes.Contains([]byte(line), []byte(`"loss":-1`)) {
				t.Errorf("row %s: want unit tokens", line)
			}
		}
	}
}
