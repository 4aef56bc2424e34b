package metrics_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/metrics"
	"github.com/gotrain/gotrain/progress"
)

// TestRowsToLauncherBatched records steps under a launcher's events pipe
// and checks that every row arrives, in order, in few events: one a
// sendPeriod and none too long for the launcher's 64 KiB lines.
func TestRowsToLauncherBatched(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	t.Setenv(event.EnvFD, fmt.Sprint(pw.Fd()))
	t.Setenv(event.EnvObserve, "hello,rows")
	rep := progress.FromEnv(progress.Rank(0))
	type line struct {
		Kind string          `json:"kind"`
		Data json.RawMessage `json:"data"`
	}
	got := make(chan []line)
	go func() {
		var lines []line
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if n := len(sc.Bytes()); n >= 64<<10 {
				t.Errorf("an event line of %d bytes; the launcher takes 64 KiB", n)
			}
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("event line %q: %v", sc.Text(), err)
			}
			lines = append(lines, l)
		}
		got <- lines
	}()

	rec, err := metrics.New(metrics.Config{Reporter: rep})
	if err != nil {
		t.Fatal(err)
	}
	const steps = 600
	start := time.Now()
	rec.StartEpoch(0)
	for i := range steps {
		st := rec.Begin()
		st.Forwarded()
		st.Backwarded()
		if i == steps/2 {
			// A pause longer than the send period, which is what makes the
			// pending rows go before the buffer fills: only its length at
			// least matters.
			time.Sleep(250 * time.Millisecond)
		}
		if err := st.End(8, float64(i), 0.1); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	rep.Close()
	pw.Close()

	var rows []event.Row
	events := 0
	for _, l := range <-got {
		if l.Kind != event.KindRow {
			continue
		}
		events++
		var batch []event.Row
		if err := json.Unmarshal(l.Data, &batch); err != nil {
			t.Fatalf("a rows event: %v", err)
		}
		rows = append(rows, batch...)
	}
	if len(rows) != steps {
		t.Fatalf("%d rows reached the launcher, want %d", len(rows), steps)
	}
	for i, r := range rows {
		if r.Step != i+1 || r.Loss != float64(i) {
			t.Fatalf("row %d is step %d with loss %v; want step %d, loss %d", i, r.Step, r.Loss, i+1, i)
		}
	}
	// Rows of about 300 bytes fill 32 KiB about every 100 steps; besides
	// those, one event a period, and the last at Close.
	row, _ := json.Marshal(rows[0])
	bySize := steps * (len(row) + 1) / (32 << 10)
	most := bySize + int(elapsed/(200*time.Millisecond)) + 2
	if events < 2 || events > most {
		t.Fatalf("%d rows events for %d rows in %v; want 2 to %d", events, steps, elapsed, most)
	}
}
