package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/event"
)

// The values of Config.OnNaN: what a step whose loss or gradient norm is
// NaN or infinite does.
const (
	OnNaNStop = "stop" // end the training with a *NonFiniteError
	OnNaNSkip = "skip" // drop the step's update on every rank, count it, train on
	OnNaNWarn = "warn" // log the first, count them, train on
)

// NonFiniteError is Train's error under Config.OnNaN stop: a step's loss
// or gradient norm was NaN or infinite.
type NonFiniteError struct {
	What  string  // "loss" or "gradient norm"
	Value float64 // NaN, +Inf or -Inf
	Step  int     // counting from 1, the steps before a resume included
	Epoch int     // counting from 1
	Rank  int     // the rank whose value it was
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("%s is %v at step %d (epoch %d) on rank %d", e.What, e.Value, e.Step, e.Epoch, e.Rank)
}

// errSkipNeedsUpdate is Train's error under OnNaN skip for a Task that
// steps its optimizer without asking Step.Update: its update could not be
// dropped.
var errSkipNeedsUpdate = errors.New("harness: Config.OnNaN skip needs the Task's Step to call Step.Update before its optimizer step (to drop the update of a non-finite step)")

// Update reports whether the Task is to step its optimizer on this step's
// gradients: call it after backward (and any clipping), before the
// optimizer step, with this rank's loss and the gradients' total norm
// (what optim.ClipGradNorm returns; 0 if the task computes none). A loss
// or norm that is NaN or infinite answers, by Config.OnNaN:
//
//   - stop: false and a *NonFiniteError, for Step to return;
//   - skip: false, on every rank if it is so on any (the ranks agree in
//     one small allreduce a step, so that DDP replicas stay equal); leave
//     the optimizer unstepped and train on (a schedule stepped per batch
//     steps as usual: the step counts);
//   - warn: true.
//
// Its error is otherwise a failed peer's. The zero Step answers true.
func (s Step) Update(ctx context.Context, loss, gradNorm float64) (bool, error) {
	if s.m == nil || s.m.nan == nil {
		return true, nil
	}
	return s.m.nan.update(ctx, loss, gradNorm)
}

// guard is Train's watch over non-finite losses and gradient norms, as
// Config.OnNaN says, and its counts for the reports; a Run keeps one over
// its Train calls.
type guard struct {
	policy string // one of the OnNaN values
	log    *slog.Logger
	pg     *distributed.Group // nil alone: nothing to agree on
	rank   int

	// The step running: counting from 1, as NonFiniteError's.
	step, epoch int
	asked       bool   // the Task called Step.Update
	bad         bool   // its loss or norm was not finite
	skipped     bool   // its update was dropped
	err         error  // Update's *NonFiniteError, under stop
	ft          *ftRun // under Config.FT: the gradients' average and the quorum's verdict first

	logged bool // the first non-finite step has been logged

	// Steps with a non-finite loss or norm (on this rank, or under skip
	// on any), and those skipped, in the run.
	nanSteps, skippedSteps int
}

func newGuard(cfg *Config, log *slog.Logger, pg *distributed.Group, rank int) *guard {
	p := cfg.OnNaN
	if p == "" {
		p = OnNaNStop
	}
	return &guard{policy: p, log: log, pg: pg, rank: rank}
}

// begin starts step (counting from 1) of epoch (counting from 1).
func (g *guard) begin(step, epoch int) {
	g.step, g.epoch = step, epoch
	g.asked, g.bad, g.skipped, g.err = false, false, false, nil
}

// update is Step.Update.
func (g *guard) update(ctx context.Context, loss, gradNorm float64) (bool, error) {
	g.asked = true
	if g.ft != nil {
		if ok, err := g.ft.update(ctx); !ok || err != nil {
			return false, err // discarded on every member: not this guard's step
		}
	}
	what, v := nonFinite(loss, gradNorm)
	rank := g.rank
	if g.policy == OnNaNSkip && g.pg != nil {
		var err error
		if what, v, rank, err = g.agree(ctx, what, v); err != nil {
			return false, err
		}
	}
	if what == "" {
		return true, nil
	}
	g.bad = true
	switch g.policy {
	case OnNaNSkip:
		g.skipped = true
		if g.rank == 0 { // every rank knows: one line for the job
			g.note(what, v, rank, "the step's update is dropped on every rank and training goes on")
		}
		return false, nil
	case OnNaNWarn:
		g.note(what, v, rank, "training goes on")
		return true, nil
	}
	g.err = g.error(what, v)
	return false, g.err
}

// agree returns the first non-finite value of all the ranks' (the
// lowest rank's), in one allreduce of one number: rank·6 + what each
// rank saw (see nonFiniteCode), +Inf for nothing.
func (g *guard) agree(ctx context.Context, what string, v float64) (string, float64, int, error) {
	buf := []float64{math.Inf(1)}
	if what != "" {
		buf[0] = float64(g.rank*6 + nonFiniteCode(what, v))
	}
	if err := g.pg.AllReduce(ctx, buf, distributed.Min); err != nil {
		return "", 0, 0, fmt.Errorf("harness: agreeing on the step's update: %w", err)
	}
	if math.IsInf(buf[0], 1) {
		return "", 0, g.rank, nil
	}
	code := int(buf[0])
	what, v = nonFiniteOf(code % 6)
	return what, v, code / 6, nil
}

// end takes the loss the Task's Step returned, the step over: it counts
// the step if it was not finite, and returns the error that ends Train.
func (g *guard) end(loss float64) error {
	if g.err != nil {
		return g.err // Step swallowed Update's error: the answer stands
	}
	if !g.asked && g.policy == OnNaNSkip {
		return errSkipNeedsUpdate
	}
	if !g.bad && !finite(loss) {
		// Update was not asked, or was asked with another value.
		g.bad = true
		if g.policy != OnNaNWarn && g.policy != OnNaNSkip {
			return g.error("loss", loss)
		}
		g.note("loss", loss, g.rank, "training goes on")
	}
	if g.bad {
		g.nanSteps++
	}
	if g.skipped {
		g.skippedSteps++
	}
	return nil
}

// error is the *NonFiniteError of this rank's value.
func (g *guard) error(what string, v float64) error {
	return &NonFiniteError{What: what, Value: v, Step: g.step, Epoch: g.epoch, Rank: g.rank}
}

// note logs the run's first non-finite step, one line.
func (g *guard) note(what string, v float64, rank int, then string) {
	if g.logged {
		return
	}
	g.logged = true
	g.log.Warn(fmt.Sprintf("%s is %v at step %d (epoch %d) on rank %d; %s (on-nan %s)", what, v, g.step, g.epoch, rank, then, g.policy),
		"step", g.step, "epoch", g.epoch)
}

// summarise adds the run's counts to a summary, when there are any:
// nan_steps (steps whose loss or gradient norm was NaN or infinite) and,
// under skip, skipped_steps.
func (g *guard) summarise(s *event.Summary) {
	if g == nil || g.nanSteps == 0 {
		return
	}
	s.Add("nan_steps", "%d", g.nanSteps)
	if g.policy == OnNaNSkip {
		s.Add("skipped_steps", "%d", g.skippedSteps)
	}
}

// nonFinite names the first of loss and gradNorm that is not finite
// ("" if both are) and its value.
func nonFinite(loss, gradNorm float64) (string, float64) {
	switch {
	case !finite(loss):
		return "loss", loss
	case !finite(gradNorm):
		return "gradient norm", gradNorm
	}
	return "", 0
}

// nonFiniteCode numbers a non-finite value (0 to 5) for agree;
// nonFiniteOf is its inverse.
func nonFiniteCode(what string, v float64) int {
	c := 0
	switch {
	case math.IsInf(v, 1):
		c = 1
	case math.IsInf(v, -1):
		c = 2
	}
	if what == "gradient norm" {
		c += 3
	}
	return c
}

func nonFiniteOf(code int) (string, float64) {
	what := "loss"
	if code >= 3 {
		what, code = "gradient norm", code-3
	}
	return what, [...]float64{math.NaN(), math.Inf(1), math.Inf(-1)}[code]
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
