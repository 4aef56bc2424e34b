package main

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gotrain/gotrain/internal/testbrowser"
	"github.com/gotrain/gotrain/launch/observe"
)

// TestDashboardOneProcessLingers serves the dashboard of a GPT trained by
// one process (--nproc-per-node 1) with --dashboard-linger: after the job
// has finished and printed its summary, the launcher still serves the
// final state, marked finished, with the run's step of its total, the
// job's unit (tokens), each evaluation's validation loss and the
// learning rate; Chromium draws it; SIGINT ends the linger at once, with
// the job's exit code.
func TestDashboardOneProcessLingers(t *testing.T) {
	g := startWatched(t, 120*time.Second, nil, progressArgs("--dashboard", "127.0.0.1:0", "--dashboard-linger", "10m")...)
	base := g.waitLine(servingRe("dashboard"), 30*time.Second)[1]
	g.waitLine(regexp.MustCompile(`^model=gpt world=1 steps=12 `), 60*time.Second)
	g.waitLine(regexp.MustCompile(`dashboard: the job finished; its final state stays at http://\S+ for 10m0s`), 30*time.Second)
	st, err := dashboardState(base)
	if err != nil {
		g.fatal("the dashboard after the job: %v", err)
	}
	p := st.Progress
	if st.State != observe.StateFinished || !st.Ended || p.Unit != "tokens" || p.Label != "eval" || p.Step != 12 || p.Steps != 12 ||
		p.Epoch != 3 || p.Epochs != 3 || len(p.Evals) != 3 {
		g.fatal("state %q ended %v, progress %+v: want finished, 12/12 steps of tokens, eval 3/3 and 3 evaluations", st.State, st.Ended, p)
	}
	for i, e := range p.Evals {
		if e.Step != 4*(i+1) || e.TrainLoss == nil || e.Metrics["val_loss"] <= 0 || e.Metrics["lr"] <= 0 {
			g.fatal("evaluation %d: %+v; want at step %d a training loss, val_loss and lr", i, e, 4*(i+1))
		}
	}
	if len(st.Workers) != 1 || len(st.Series[0]) != 12 || st.Series[0][0][6] <= 0 {
		g.fatal("workers %+v, %d points: want rank 0's 12 rows with their learning rate", st.Workers, len(st.Series[0]))
	}

	t.Run("page", func(t *testing.T) {
		ctx := testbrowser.Context(t, 60*time.Second)
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitReady("#lr polyline")); err != nil {
			t.Fatalf("the page drew no learning-rate curve: %v", err)
		}
		type page struct {
			State, Step, Period, Evaluation string
			LR, Loss                        int
			Units                           []string
		}
		pg, err := chromedp.Run(ctx, chromedp.Evaluate[page](`({
  State: document.getElementById("state").textContent, Step: document.getElementById("step").textContent,
  Period: document.getElementById("period").textContent, Evaluation: document.getElementById("evaluation").textContent,
  LR: document.querySelectorAll("#lr polyline").length, Loss: document.querySelectorAll("#loss polyline").length,
  Units: [...document.querySelectorAll(".unit")].map(e => e.textContent),
})`))
		if err != nil {
			t.Fatal(err)
		}
		state, step, period, evaluation, lr, loss, units := pg.State, pg.Step, pg.Period, pg.Evaluation, pg.LR, pg.Loss, pg.Units
		if !strings.HasPrefix(state, "state finished") || step != "step 12/12" || period != "eval 3/3" ||
			!strings.Contains(evaluation, "val_loss ") || !strings.Contains(evaluation, "lr ") || lr != 1 || loss != 2 ||
			strings.Join(units, ",") != "tokens,tokens" {
			t.Fatalf("page: state %q, %q, %q, evaluation %q, %d lr and %d loss curves, units %q; want finished, step 12/12, eval 3/3, "+
				"val_loss and lr, one lr curve, rank 0's loss and the validation loss, tokens", state, step, period, evaluation, lr, loss, units)
		}
	})

	if g.ended() {
		g.fatal("gotrain exited during its linger")
	}
	if err := syscall.Kill(g.pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		g.fatal("gotrain still runs 30 s after SIGINT ended its linger")
	}
	if g.code != 0 {
		g.fatal("exit code %d after the linger; want the job's, 0", g.code)
	}
}

// TestDashboardInterruptedDoesNotLinger: a job the user stops with SIGTERM
// takes its dashboard with it, whatever --dashboard-linger says: the
// signal was meant for the whole launcher.
func TestDashboardInterruptedDoesNotLinger(t *testing.T) {
	g := startWatched(t, 120*time.Second, nil, "train", "mnist", "--epochs", "1000", "--progress", "--log-every", "0.001",
		"--dashboard", "127.0.0.1:0", "--dashboard-linger", "10m")
	g.waitLine(servingRe("dashboard"), 30*time.Second)
	g.waitLine(regexp.MustCompile(`^epoch 1/1000 \d+/938 `), 60*time.Second)
	if err := syscall.Kill(g.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.done:
	case <-time.After(60 * time.Second):
		g.fatal("gotrain still runs 60 s after SIGTERM: its dashboard lingers")
	}
	if g.code != 128+int(syscall.SIGTERM) {
		g.fatal("exit code %d after SIGTERM; want %d", g.code, 128+int(syscall.SIGTERM))
	}
	if strings.Contains(g.all.String(), "final state stays") {
		g.fatal("an interrupted job offered to keep its dashboard")
	}
}
