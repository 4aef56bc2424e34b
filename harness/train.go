package harness

import (
	"context"
	"errors"
	"fmt"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/nn"
)

// Task is what a program trains: its step on a batch and its
// evaluation. Everything else of the loop is the harness's.
type Task interface {
	// Step takes one optimizer step on b, a batch of this rank's shard,
	// and returns this rank's loss: zero the gradients, run the forward
	// pass and the loss (under Run.Autocast), call s.Forwarded, run
	// backward (which, under DDP, averages the gradients across the
	// ranks, and returns a failed peer's error), call s.Backwarded, step
	// the optimizer if s.Update says so (and a schedule stepped per
	// batch). An error ends the training.
	Step(ctx context.Context, s Step, b data.Batch) (loss float64, err error)
	// Evaluate measures the model (on rank 0, outside the throughput
	// clock) at the end of each epoch, or every Loop.EvalEvery steps, and
	// returns the figures to report, such as the test accuracy.
	//
	// Under Config.Sharding every rank calls it, with the model sharded
	// (see Run.WithModel), and rank 0's figures are reported: it must run
	// the same forward passes on every rank (the same data, which every
	// rank must have), and write nothing a rank's copy would clobber.
	Evaluate(ctx context.Context) ([]Metric, error)
}

// EpochEnder is a Task with something to do once an epoch is over,
// such as stepping a learning-rate schedule per epoch. Train calls
// EndEpoch when an epoch completes, not when the run stops within one
// (the run that resumes it completes it).
type EpochEnder interface {
	EndEpoch(epoch int)
}

// Step is the step being trained, for the Task to mark its phases (the
// profile, the metrics rows and the timeline split the step's time at
// the marks) and to ask whether to apply its update (see Update). The
// zero Step marks nothing.
type Step struct{ m *meter }

// Forwarded marks the end of the forward pass and the loss.
func (s Step) Forwarded() {
	if s.m != nil {
		s.m.forwarded()
	}
}

// Backwarded marks the end of backward, the gradients averaged.
func (s Step) Backwarded() {
	if s.m != nil {
		s.m.backwarded()
	}
}

// Metric is a figure of an evaluation: Name=Value on the evaluation's
// line, with Value formatted by Format (a verb of package fmt; "" means
// "%.4f"), and on the progress bar's.
type Metric struct {
	Name   string
	Value  float64
	Format string
}

// Loop is what Train runs: the data, what a checkpoint holds, how long
// to train and how often to evaluate. Data, Sampler and State (its Model
// and Optimizer) are required; the zero values of the others train one
// epoch and evaluate at its end.
type Loop struct {
	// Data gives this rank's batches in the order of Sampler.
	Data *data.Loader
	// Sampler is Data's sampler: Train sets its epoch, and checkpoints
	// save its place in the epoch.
	Sampler Sampler
	// State is what a checkpoint saves and Resume loads: the model, the
	// optimizer, the scheduler, the counters Train advances (the epoch
	// and the steps, counting those before a resume) and the program's
	// Extra.
	State *checkpoint.TrainingState

	// Epochs is how many passes over the data to train; 0 means 1. It is
	// not used with Steps.
	Epochs int
	// Steps, if set, is the length of the training in optimizer steps,
	// counting those before a resume, whatever the epochs.
	Steps int
	// MaxSteps, if set, stops this run (not the training, which a
	// resumed run carries on) after this many steps, as for benchmarks
	// and tests.
	MaxSteps int
	// EvalEvery, if set, evaluates every this many steps and at the end,
	// a progress bar per interval; 0 evaluates at the end of every epoch,
	// a bar per epoch.
	EvalEvery int
	// Tokens counts a batch as its tokens (Len()×T) rather than its
	// samples, for the throughput, the progress and the metrics rows.
	Tokens bool
}

// Sampler is what Train needs of a sampler: a place in the data that a
// checkpoint saves and restores, and the epoch to visit.
// *data.DistributedSampler implements it.
type Sampler interface {
	data.ResumableSampler
	SetEpoch(epoch int)
}

// check panics on a Loop no correct program passes.
func (l *Loop) check() {
	switch {
	case l.Data == nil || l.Sampler == nil || l.State == nil:
		panic("harness: Loop: Data, Sampler and State are required")
	case l.State.Model == nil || l.State.Optimizer == nil:
		panic("harness: Loop: State.Model and State.Optimizer are required")
	case l.Epochs < 0 || l.Steps < 0 || l.MaxSteps < 0 || l.EvalEvery < 0:
		panic(fmt.Sprintf("harness: Loop: negative count: Epochs %d Steps %d MaxSteps %d EvalEvery %d", l.Epochs, l.Steps, l.MaxSteps, l.EvalEvery))
	}
}

// over reports whether the training is over before epoch.
func (l *Loop) over(epoch int) bool {
	if l.Steps > 0 {
		return l.State.Step >= int64(l.Steps)
	}
	return epoch >= max(l.Epochs, 1)
}

// planned is the number of steps the training takes in all, for the
// progress bars of evaluation intervals.
func (l *Loop) planned() int {
	if l.Steps > 0 {
		return l.Steps
	}
	return max(l.Epochs, 1) * l.Data.Len()
}

// Stats are a run's figures as this rank saw them.
type Stats struct {
	World, Rank int
	// Epochs is the last epoch trained, counting from 1.
	Epochs int
	// Steps are the steps taken in this run (after a resume, since it).
	Steps int
	// Throughput is the samples (with Loop.Tokens, tokens) per second of
	// all ranks over the steps from ThroughputFrom on (after the first 5;
	// in a run of 5 steps or fewer, after the first), without the
	// evaluations and checkpoints.
	Throughput     float64
	ThroughputFrom int
	// TrainLoss is the mean loss of the last evaluation interval (or
	// epoch) over every rank's steps: NaN (or infinite) if a step's loss
	// was, but for the steps Config.OnNaN skip dropped, which are in no
	// mean (NaN if all were).
	TrainLoss  float64
	PeakRSSMiB float64
	// Profile is the mean time per step in each phase, after the first 5.
	Profile Profile
	// NaNSteps are the steps whose loss or gradient norm was NaN or
	// infinite (on this rank; under Config.OnNaN skip, on any), and
	// SkippedSteps those of them whose update was dropped.
	NaNSteps, SkippedSteps int
}

// errNoBatches is Train's error for a Loop whose Data has no batch.
var errNoBatches = errors.New("harness: the data has no batch for this rank")

// Train runs the training loop: from the resumed epoch and step (see
// Resume, which it calls first unless the program has), every batch of
// l.Data through task.Step, until l.Steps, l.Epochs or l.MaxSteps. At
// the end of each epoch (or every l.EvalEvery steps) it averages the
// ranks' losses, has rank 0 evaluate, and reports both: on the progress
// bar, or as rank 0's line ("epoch 1: train_loss=0.3114 test_acc=0.9619").
// Rank 0 checkpoints (with Config.Save) at the end of every epoch and of
// the run, and every Config.SaveEvery steps. It meters the loop: the
// throughput clock, the profile, the metrics rows and the timeline.
//
// A step whose loss (or the gradient norm the Task gives Step.Update) is
// NaN or infinite does what Config.OnNaN says: by default Train ends with
// a *NonFiniteError naming the step, its epoch and the rank.
//
// Under Config.Sharding every rank writes its shards of each checkpoint
// and runs the evaluation on the sharded model, and when Train ends rank
// 0 writes Config.Save's model file from the units gathered one at a
// time. No rank's module holds the whole model, then or after Train:
// what the program does with the model after training (sampling, an
// evaluation of its own) goes through WithModel. Under Config.LocalSGD or DiLoCo each
// step is followed by the replica's AfterStep, and the end of the
// training (l.Steps or l.Epochs, not l.MaxSteps) by a sync of every
// replica before the last evaluation and checkpoint.
//
// Train returns the first error of the task or the environment (a peer,
// a file, ctx); the state is then as the last checkpoint left it on
// rank 0, and Resume carries on from there.
func (r *Run) Train(ctx context.Context, task Task, l Loop) (Stats, error) {
	l.check()
	if l.Data.Len() == 0 {
		return Stats{}, errNoBatches
	}
	if !r.resumed {
		if _, err := r.Resume(ctx, &l); err != nil {
			return Stats{}, err
		}
	}
	if r.ft != nil {
		return r.trainFT(ctx, task, l)
	}
	m, err := r.newMeter(planOf(&l))
	if err != nil {
		return Stats{}, err
	}
	defer m.close()
	if r.nan == nil {
		r.nan = newGuard(&r.cfg, r.log, r.pg, r.rank)
	}
	g := r.nan
	m.nan = g
	nan0, skipped0 := g.nanSteps, g.skippedSteps
	st, stats := l.State, Stats{World: r.world, Rank: r.rank}
	nn.SetTrain(st.Model, true)
	for epoch, end := st.Epoch, false; !end && !l.over(epoch); epoch++ {
		st.Epoch = epoch
		l.Sampler.SetEpoch(epoch) // keeps a resumed position within this epoch
		m.startEpoch(epoch)
		complete := true
		for b := range l.Data.Batches() {
			if err := ctx.Err(); err != nil {
				return stats, err
			}
			if err := m.begin(ctx, int(st.Step)+1); err != nil {
				return stats, err
			}
			g.begin(int(st.Step)+1, epoch+1)
			loss, err := task.Step(ctx, Step{m}, b)
			if err != nil {
				return stats, err
			}
			if r.lm != nil {
				if err := r.lm.AfterStep(ctx); err != nil {
					return stats, fmt.Errorf("harness: syncing the replicas: %w", err)
				}
			}
			st.Step++
			n := b.Len()
			if l.Tokens {
				n *= b.T
			}
			r.tokens += int64(n)
			r.countsTokens = l.Tokens
			step := int(st.Step)
			m.end(loss, n)
			if err := g.end(loss); err != nil {
				return stats, err
			}
			end = l.Steps > 0 && step >= l.Steps || l.MaxSteps > 0 && m.steps >= l.MaxSteps
			if l.Steps > 0 && step >= l.Steps {
				// The training is over: the replicas agree before the
				// last evaluation and save.
				if err := r.syncLocal(ctx); err != nil {
					return stats, err
				}
			}
			if l.EvalEvery > 0 && (step%l.EvalEvery == 0 || end) {
				if err := r.endPeriod(ctx, task, m, "step", step, &stats); err != nil {
					return stats, err
				}
			}
			if every := r.cfg.SaveEvery; every > 0 && step%every == 0 && !end {
				if err := r.checkpoint(ctx, m, &l); err != nil {
					return stats, err
				}
			}
			if end {
				complete = false
				break
			}
		}
		if err := m.stopClock(ctx); err != nil {
			return stats, err
		}
		if e, ok := task.(EpochEnder); ok && complete {
			e.EndEpoch(epoch)
		}
		if complete && l.Steps == 0 && l.over(epoch+1) {
			if err := r.syncLocal(ctx); err != nil {
				return stats, err
			}
		}
		stats.Epochs = epoch + 1
		if l.EvalEvery == 0 {
			if err := r.endPeriod(ctx, task, m, "epoch", epoch+1, &stats); err != nil {
				return stats, err
			}
		}
		if complete {
			st.Epoch = epoch + 1 // a resumed run starts with the next
		}
		if err := r.checkpoint(ctx, m, &l); err != nil {
			return stats, err
		}
	}
	if l.EvalEvery > 0 && m.lossSteps > 0 {
		// The epochs ended within an evaluation interval: it ends too.
		if err := r.endPeriod(ctx, task, m, "step", int(st.Step), &stats); err != nil {
			return stats, err
		}
	}
	if err := m.closeMetrics(); err != nil {
		return stats, err
	}
	if r.fm != nil {
		if err := m.untimed("checkpoint", func() error { return r.finishSharded(ctx) }); err != nil {
			return stats, err
		}
	}
	if r.fm != nil || r.lm != nil {
		if err := r.gatherRSS(ctx); err != nil {
			return stats, err
		}
	}
	stats = m.summarise(stats)
	stats.NaNSteps, stats.SkippedSteps = g.nanSteps-nan0, g.skippedSteps-skipped0
	if r.cfg.Profile && r.rank == 0 {
		fmt.Fprintln(r.lines, stats.Profile)
	}
	return stats, nil
}

// syncLocal syncs the LocalSGD or DiLoCo replicas, if the run has them,
// at the end of the training; a run that stops before (Loop.MaxSteps)
// leaves them as they are, for its checkpoint to resume exactly.
func (r *Run) syncLocal(ctx context.Context) error {
	if r.lm == nil {
		return nil
	}
	if c := r.cfg; c.DiLoCoFragments <= 1 && c.DiLoCoDelay == 0 && r.lm.Step()%int64(c.syncEvery()) == 0 {
		return nil // this step's sync was of the whole model: the replicas agree
	}
	if err := r.lm.Sync(ctx); err != nil {
		return fmt.Errorf("harness: syncing the replicas at the end: %w", err)
	}
	return nil
}

// endPeriod ends an epoch or an evaluation interval, the n-th epoch or
// at step n (label says which): the ranks' mean loss, rank 0's
// evaluation (under sharding every rank's; outside the clock, a span of
// the timeline), and the report of both.
func (r *Run) endPeriod(ctx context.Context, task Task, m *meter, label string, n int, stats *Stats) error {
	loss, err := m.periodLoss(ctx)
	if err != nil {
		return err
	}
	stats.TrainLoss = loss
	var metrics []Metric
	if r.rank == 0 || r.fm != nil {
		err = m.untimed("evaluate", func() error {
			var err error
			metrics, err = r.evaluate(ctx, task)
			return err
		})
	}
	if err != nil {
		return err
	}
	m.report(label, n, loss, metrics)
	return nil
}
