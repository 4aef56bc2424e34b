package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gotrain/gotrain/internal/testbrowser"
)

// pageState is what the test reads of the dashboard's page.
type pageState struct {
	Version    string `json:"version"`
	Loss       int    `json:"loss"`       // polylines drawn
	LossPoints int    `json:"lossPoints"` // points in them
	Throughput int    `json:"throughput"`
	StepTime   int    `json:"steptime"`
	Exposed    int    `json:"exposed"`
	Rows       int    `json:"rows"` // workers' table rows
	Ranks      string `json:"ranks"`
}

const readPage = `(() => {
  const n = id => document.querySelectorAll("#" + id + " polyline").length;
  return {
    version: document.body.dataset.version || "",
    loss: n("loss"), lossPoints: Number(document.getElementById("loss").dataset.points),
    throughput: n("throughput"), steptime: n("steptime"), exposed: n("exposed"),
    rows: document.querySelectorAll("#workers tbody tr").length,
    ranks: document.getElementById("ranks").textContent,
  };
})()`

// TestDashboardInChromium opens the dashboard of a 2-worker run in
// headless Chromium: the curves are drawn (one step-time line per rank),
// then grow as the run goes on; the page is saved as a screenshot
// (to $GOTRAIN_DASHBOARD_SCREENSHOT if set, for the README).
func TestDashboardInChromium(t *testing.T) {
	ctx := testbrowser.Context(t, 90*time.Second)
	g := startWatched(t, 120*time.Second, nil, "train", "mnist", "--nproc-per-node", "2", "--max-steps", "100000",
		"--dashboard", "127.0.0.1:0")
	base := g.waitLine(servingRe("dashboard"), 30*time.Second)[1]

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitReady("#steptime polyline")); err != nil {
		t.Fatalf("the dashboard drew no step-time curve: %v; output:\n%s", err, g.all.String())
	}
	read := func() pageState {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[pageState](readPage))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var first pageState
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		first = read()
		if first.StepTime == 2 && first.Rows == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page shows %+v, want both ranks' curves and rows", first)
		}
	}
	if first.Loss != 2 || first.Throughput != 1 || first.Exposed != 2 || first.LossPoints < 2 {
		t.Fatalf("curves drawn: %+v", first)
	}
	var later pageState
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		later = read()
		if later.Version != first.Version && later.LossPoints > first.LossPoints {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not update: first %+v, 30 s later %+v", first, later)
		}
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("GOTRAIN_DASHBOARD_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("page %+v then %+v; screenshot %s (%d bytes)", first, later, out, len(png))
	g.stop()
}
