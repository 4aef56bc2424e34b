package observe

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/internal/testbrowser"
)

// TestDashboardMarksStraggler opens the dashboard in headless Chromium
// with three ranks, rank 2 taking three times as long per step as the
// others, and checks that its row, and only its, is marked slow.
func TestDashboardMarksStraggler(t *testing.T) {
	ctx := testbrowser.Context(t, 60*time.Second)
	h, err := New(Options{RunID: "s1", Node: "0", Ranks: 3, DashboardAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for step := 1; step <= 10; step++ {
		var rows []event.Row
		for rank := range 3 {
			ms := 10.0
			if rank == 2 {
				ms = 30
			}
			rows = append(rows, event.Row{Rank: rank, Step: step, Steps: 1, Epoch: 1, Loss: 1, Samples: 64,
				SamplesPerSec: 64e3 / ms, StepMS: ms, ForwardMS: ms / 2, BackwardMS: ms / 2, Time: float64(step)})
		}
		for _, row := range rows {
			data, _ := json.Marshal([]event.Row{row})
			h.Event(row.Rank, fmt.Appendf(nil, `{"kind":%q,"rank":%d,"data":%s}`, event.KindRow, row.Rank, data))
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+h.Addr("dashboard")+"/"), chromedp.WaitReady("#workers tbody tr:nth-child(3)")); err != nil {
		t.Fatalf("the dashboard shows no row for each of 3 ranks: %v", err)
	}
	classes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#workers tbody tr")].map(tr => tr.cells[0].textContent + ":" + tr.className)`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0:", "1:", "2:slow"}
	if fmt.Sprint(classes) != fmt.Sprint(want) {
		t.Fatalf("the workers' rows are %q, want %q (only rank 2 marked slow)", classes, want)
	}
}
