package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	Step       string `json:"step"` // the run's step of its total
	Period     string `json:"period"`
	ETA        string `json:"eta"`
	Units      string `json:"units"` // the unit each rate is named in
}

// readPage is a JavaScript function that reads a pageState off the page.
const readPage = `() => {
  const n = id => document.querySelectorAll("#" + id + " polyline").length;
  return {
    version: document.body.dataset.version || "",
    loss: n("loss"), lossPoints: Number(document.getElementById("loss").dataset.points),
    throughput: n("throughput"), steptime: n("steptime"), exposed: n("exposed"),
    rows: document.querySelectorAll("#workers tbody tr").length,
    ranks: document.getElementById("ranks").textContent,
    step: document.getElementById("step").textContent, period: document.getElementById("period").textContent,
    eta: document.getElementById("eta").textContent,
    units: [...document.querySelectorAll(".unit")].map(e => e.textContent).join(","),
  };
}`

// waitPage waits until the page's state s satisfies cond, a JavaScript
// expression of s, and returns that state: the page checks cond at each
// change of its document (a MutationObserver), so the test waits for
// the redraw itself. ctx bounds the wait.
func waitPage(ctx context.Context, cond string) (pageState, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[pageState](`new Promise(resolve => {
  const read = `+readPage+`;
  const done = s => (`+cond+`);
  const obs = new MutationObserver(() => {
    const s = read();
    if (done(s)) { obs.disconnect(); resolve(s); }
  });
  obs.observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
  const s = read();
  if (done(s)) { obs.disconnect(); resolve(s); }
})`, chromedp.EvalAwaitPromise))
}

// TestDashboardInChromium opens the dashboard of a 2-worker run in
// headless Chromium: the curves are drawn (one step-time line per rank),
// then grow as the run goes on; the page is saved as a screenshot
// (to $GOTRAIN_DASHBOARD_SCREENSHOT if set, for the README).
func TestDashboardInChromium(t *testing.T) {
	ctx := testbrowser.Context(t, 90*time.Second)
	// The run lasts until the test stops it: the page must see it go on.
	g := startWatched(t, 120*time.Second, nil, "train", "mnist", "--nproc-per-node", "2", "--epochs", "1000",
		"--dashboard", "127.0.0.1:0")
	base := g.waitLine(servingRe("dashboard"), 30*time.Second)[1]

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitReady("#steptime polyline")); err != nil {
		t.Fatalf("the dashboard drew no step-time curve: %v; output:\n%s", err, g.all.String())
	}
	// Each wait is bounded by the page's progress, not the whole run's.
	wait := func(what, cond string) pageState {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := waitPage(wctx, cond)
		if err != nil {
			now, _ := chromedp.Run(ctx, chromedp.Evaluate[pageState]("("+readPage+")()"))
			t.Fatalf("the page did not show %s within 30 s (%v): it shows %+v; output:\n%s", what, err, now, g.all.String())
		}
		return s
	}
	first := wait("both ranks' curves and rows", "s.steptime == 2 && s.rows == 2")
	if first.Loss != 2 || first.Throughput != 1 || first.Exposed != 2 || first.LossPoints < 2 {
		t.Fatalf("curves drawn: %+v", first)
	}
	version, _ := json.Marshal(first.Version)
	later := wait(fmt.Sprintf("an update of %+v", first),
		fmt.Sprintf("s.version !== %s && s.lossPoints > %d", version, first.LossPoints))
	// The run's place: 1000 epochs of 469 steps, counted in samples.
	placed := wait("the run's step of its total and ETA", `/^step \d+\/469000$/.test(s.step) && /^ETA \d+:\d\d/.test(s.eta)`)
	if !strings.HasPrefix(placed.Period, "epoch ") || !strings.HasSuffix(placed.Period, "/1000") || placed.Units != "samples,samples" {
		t.Fatalf("page %+v: want epoch k/1000 and rates in samples/s", placed)
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
