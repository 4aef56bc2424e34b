package observe

import (
	"testing"
)

// TestProgressState: the hub keeps what the dashboard shows of the
// workers' progress events: the unit, the evaluation interval, the
// slowest rank's step of the run's total, the ranks' summed rate, the
// longest ETA and rank 0's evaluations; SetState(StateFinished) ends the
// job's clock.
func TestProgressState(t *testing.T) {
	h, err := New(Options{Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ev := func(rank int, line string) { h.Event(rank, []byte(line)) }
	ev(0, `{"kind":"epoch","label":"eval","epoch":1,"epochs":3,"steps":4,"unit":"tokens","run_steps":12}`)
	ev(1, `{"kind":"step","label":"eval","epoch":1,"epochs":3,"steps":4,"step":3,"unit":"tokens","rate":1000,"run_step":3,"run_steps":12,"eta":90}`)
	ev(0, `{"kind":"step","label":"eval","epoch":1,"epochs":3,"steps":4,"step":4,"unit":"tokens","rate":1200,"run_step":4,"run_steps":12,"eta":80}`)
	ev(0, `{"kind":"done","label":"eval","epoch":1,"epochs":3,"steps":4,"step":4,"unit":"tokens","loss":2.5,"rate":1200,"eta":80,"run_step":4,"run_steps":12,"metrics":{"val_loss":2.7,"lr":0.001},"names":["val_loss","lr"]}`)
	ev(1, `{"kind":"done","label":"eval","epoch":1,"epochs":3,"steps":4,"step":4,"unit":"tokens","loss":2.5,"rate":1000,"eta":70,"run_step":4,"run_steps":12}`)
	ev(0, `not an event`)
	p := h.Snapshot().Progress
	if p.Unit != "tokens" || p.Label != "eval" || p.Epoch != 1 || p.Epochs != 3 || p.Step != 4 || p.Steps != 12 || p.ETA != 80 || p.Rate != 2200 {
		t.Fatalf("progress %+v: want tokens, eval 1/3, step 4 of 12, ETA 80, 2200 tokens/s", p)
	}
	if len(p.Evals) != 1 || p.Evals[0].Step != 4 || *p.Evals[0].TrainLoss != 2.5 || p.Evals[0].Metrics["val_loss"] != 2.7 ||
		p.Evals[0].Names[1] != "lr" {
		t.Fatalf("evaluations %+v: want rank 0's at step 4, train_loss 2.5, val_loss 2.7, lr", p.Evals)
	}
	st := h.Snapshot()
	if st.Ended || st.State != "running" {
		t.Fatalf("state %q, ended %v: want running", st.State, st.Ended)
	}
	h.SetState(StateFinished)
	first := h.Snapshot()
	if !first.Ended || first.State != StateFinished {
		t.Fatalf("state %q, ended %v: want finished", first.State, first.Ended)
	}
	if again := h.Snapshot(); again.Uptime != first.Uptime {
		t.Fatalf("uptime %v then %v: a finished job's clock is stopped", first.Uptime, again.Uptime)
	}
}
