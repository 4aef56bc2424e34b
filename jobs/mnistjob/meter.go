package mnistjob

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/metrics"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/progress"
	"github.com/gotrain/gotrain/tensor"
)

// warmupSteps are excluded from samples/s, as in the PyTorch reference
// script.
const warmupSteps = 5

// Profile is the mean time per step spent in each phase.
type Profile struct {
	Data, Forward, Backward, ExposedAllReduce, Optimizer time.Duration
	// AllReduce is the whole time spent reducing gradients, hidden by
	// backward or not.
	AllReduce time.Duration
}

// String is the profile line `--profile` prints.
func (p Profile) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }
	return fmt.Sprintf("profile per step: data_ms=%s forward_ms=%s backward_ms=%s (of which exposed_allreduce_wait_ms=%s) optimizer_ms=%s allreduce_total_ms=%s",
		ms(p.Data), ms(p.Forward), ms(p.Backward), ms(p.ExposedAllReduce), ms(p.Optimizer), ms(p.AllReduce))
}

// meter is the training loop's bookkeeping, kept out of its way: the
// throughput clock, the per-phase profile, the epoch's mean loss and the
// progress report. The loop calls startStep, forwarded, backwarded and
// stepped around the phases of each step.
type meter struct {
	pg     *distributed.Group // nil alone: no ranks to line up
	dm     *ddp.Model         // nil alone: no allreduce to profile
	world  int
	epochs int
	rep    *progress.Reporter // nil without progress
	owned  bool               // rep was made here, and is closed by close
	out    io.Writer          // the job's lines: above the display if there is one
	steps  int                // taken in this run

	// The clock counts training time from step warmupSteps on, without
	// evaluation and checkpoints (as the PyTorch script stops its clock
	// before evaluating); countStart is zero while it is stopped.
	counted    int // samples of this rank within counting
	counting   time.Duration
	countStart time.Time

	prof       Profile // sums over profiled steps
	profiled   int
	dataStart  time.Time // when the loop asked for the next batch
	t0, t1, t2 time.Time // step start, forward done, backward done
	before     ddp.Stats
	bar        *progress.Bar // nil without progress
	lossSum    float64       // of this epoch's steps on this rank
	epochSteps int

	rec    *metrics.Recorder // nil without metrics or a trace (observe.go)
	recSt  *metrics.Step
	recErr error
	opt    optim.Optimizer
}

// newMeter meters j's loop. With cfg.Progress every rank reports to
// cfg.Reporter, or to progress.FromEnv's (which, without a launcher, only
// rank 0's renders).
func newMeter(j *job) *meter {
	m := &meter{pg: j.pg, dm: j.dm, world: j.world, epochs: j.cfg.Epochs, out: j.cfg.Out}
	if j.cfg.Progress {
		m.rep = j.cfg.Reporter
		if m.rep == nil {
			m.rep = progress.FromEnv(progress.Output(j.cfg.Out), progress.Rank(j.rank))
			m.owned = true
		}
		m.out = m.rep.Writer()
	}
	return m
}

// close closes the reporter the meter made.
func (m *meter) close() {
	if m.rec != nil {
		_ = m.rec.Close() // after a failed step: keep what was recorded
	}
	if m.owned {
		_ = m.rep.Close() // the launcher's pipe; nothing to do if it broke
	}
}

// startEpoch starts the epoch's clock (after the warm-up) and its bar.
func (m *meter) startEpoch(epoch, batches int) {
	m.lossSum, m.epochSteps = 0, 0
	if m.rec != nil {
		m.rec.StartEpoch(epoch)
	}
	if m.rep != nil {
		m.bar = m.rep.Epoch(epoch, m.epochs, batches)
	}
	now := time.Now()
	if m.steps >= warmupSteps {
		m.countStart = now
	}
	m.dataStart = now
}

// startStep marks the start of a step. At the end of the warm-up it lines
// the ranks up and restarts the clock and the profile from zero.
func (m *meter) startStep(ctx context.Context) error {
	if m.steps == warmupSteps {
		if m.pg != nil {
			if err := m.pg.Barrier(ctx); err != nil {
				return err
			}
		}
		m.countStart, m.counted, m.counting = time.Now(), 0, 0
		m.prof, m.profiled = Profile{}, 0
	}
	m.t0 = time.Now()
	if m.rec != nil {
		m.recSt = m.rec.Begin()
	}
	return nil
}

// forwarded marks the end of the forward pass (and the loss).
func (m *meter) forwarded() {
	m.t1 = time.Now()
	if m.dm != nil {
		m.before = m.dm.Stats()
	}
	if m.recSt != nil {
		m.recSt.Forwarded()
	}
}

// backwarded marks the end of backward, gradients reduced.
func (m *meter) backwarded() {
	m.t2 = time.Now()
	if m.recSt != nil {
		m.recSt.Backwarded()
	}
}

// stepped marks the end of the optimizer step of a batch of n samples
// with the given loss, and adds the step to the profile and the bar.
func (m *meter) stepped(loss *tensor.Tensor, n int) {
	now := time.Now()
	m.prof.Data += m.t0.Sub(m.dataStart)
	m.prof.Forward += m.t1.Sub(m.t0)
	m.prof.Backward += m.t2.Sub(m.t1)
	m.prof.Optimizer += now.Sub(m.t2)
	if m.dm != nil {
		after := m.dm.Stats()
		m.prof.ExposedAllReduce += after.ExposedWait - m.before.ExposedWait
		m.prof.AllReduce += after.Reducing - m.before.Reducing
	}
	m.profiled++
	m.steps++
	m.counted += n
	l := float64(loss.Item())
	m.lossSum += l
	m.epochSteps++
	if m.bar != nil {
		m.bar.Step(n, progress.Loss(l))
	}
	if m.recSt != nil {
		if err := m.recSt.End(n, l, m.opt.LR()); err != nil && m.recErr == nil {
			m.recErr = err
		}
	}
	m.dataStart = time.Now()
}

// untimed runs f (a checkpoint, an evaluation) with the clock and the
// profile paused; the timeline shows it as a span named name.
func (m *meter) untimed(name string, f func() error) error {
	paused := time.Now()
	err := f()
	pause := time.Since(paused)
	if m.rec != nil {
		m.rec.Span(name, paused, paused.Add(pause))
	}
	if !m.countStart.IsZero() {
		m.countStart = m.countStart.Add(pause)
	}
	m.dataStart = m.dataStart.Add(pause)
	return err
}

// endEpoch stops the clock once the slowest rank is done.
func (m *meter) endEpoch(ctx context.Context) error {
	if !m.countStart.IsZero() {
		if m.pg != nil {
			if err := m.pg.Barrier(ctx); err != nil {
				return err
			}
		}
		m.counting += time.Since(m.countStart)
		m.countStart = time.Time{}
	}
	return nil
}

// epochLoss is the epoch's training loss: the mean over its steps of
// every rank's mean loss, the same on every rank.
func (m *meter) epochLoss(ctx context.Context) (float64, error) {
	mean := []float64{m.lossSum / float64(max(m.epochSteps, 1))}
	if m.pg != nil {
		if err := m.pg.AllReduce(ctx, mean, distributed.Avg); err != nil {
			return 0, err
		}
	}
	return mean[0], nil
}

// report ends the epoch's bar, or without progress has rank 0 print the
// epoch's line itself.
func (m *meter) report(rank, epoch int, loss, acc float64) {
	switch {
	case m.bar != nil && rank == 0:
		m.bar.Done(progress.Loss(loss), progress.Metric("test_acc", acc))
	case m.bar != nil:
		m.bar.Done(progress.Loss(loss))
	case rank == 0:
		fmt.Fprintf(m.out, "epoch %d: train_loss=%.4f test_acc=%.4f\n", epoch+1, loss, acc)
	}
	m.bar = nil
}

// summarise adds the run's throughput, steps, mean profile and peak RSS
// to res.
func (m *meter) summarise(res Result) Result {
	if m.counting > 0 {
		res.SamplesPerSec = float64(m.counted*m.world) / m.counting.Seconds()
	}
	res.Steps = m.steps
	if n := time.Duration(m.profiled); n > 0 {
		p := m.prof
		res.Profile = Profile{p.Data / n, p.Forward / n, p.Backward / n, p.ExposedAllReduce / n, p.Optimizer / n, p.AllReduce / n}
	}
	res.PeakRSSMiB = peakRSSMiB()
	return res
}
