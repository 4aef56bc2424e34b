package observe

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A rank's row with a NaN loss (null on the pipe) reaches the metrics
// file as null and the dashboard's state as null, which the page shows
// as NaN, rather than failing to encode or reading as 0.
func TestNonFiniteLoss(t *testing.T) {
	file := filepath.Join(t.TempDir(), "m.jsonl")
	h, err := New(Options{Ranks: 1, MetricsFile: file})
	if err != nil {
		t.Fatal(err)
	}
	h.Event(0, []byte(`{"kind":"metrics","rank":0,"data":[{"rank":0,"epoch":1,"step":1,"steps":1,"loss":2.5,"lr":0.1,"samples":8},`+
		`{"rank":0,"epoch":1,"step":2,"steps":1,"loss":null,"lr":0.1,"samples":8}]}`))
	st := h.Snapshot()
	if last := st.Workers[0].Last; last == nil || !math.IsNaN(last.Loss) {
		t.Fatalf("last row %+v: want its loss NaN", last)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatalf("encoding the dashboard's state: %v", err)
	}
	if s := string(b); !strings.Contains(s, `"series":{"0":[[1,`) || !strings.Contains(s, `[2,`) ||
		strings.Count(s, "null") != 2 || !strings.Contains(s, `"loss":null`) {
		t.Fatalf("state %s: want the second point's loss and the last row's as null", s)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(rows)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"loss":2.5`) || !strings.Contains(lines[1], `"loss":null`) {
		t.Fatalf("metrics file:\n%s", rows)
	}
}
