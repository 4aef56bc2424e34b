package gptjob

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/metrics"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/progress"
)

// warmupSteps are excluded from tokens/s, as in the PyTorch reference
// script.
const warmupSteps = 5

// meter is the training loop's bookkeeping, kept out of its way: the
// throughput clock, the losses of each evaluation interval and the
// progress report, one bar per interval of EvalEvery steps. The loop
// calls startStep, forwarded, backwarded and stepped around the phases of
// each step.
type meter struct {
	pg        *distributed.Group // nil alone
	world     int
	rank      int
	every     int // steps per interval
	intervals int
	rep       *progress.Reporter // nil without progress
	owned     bool               // rep was made here, and is closed by close
	out       io.Writer
	bar       *progress.Bar // the current interval's; nil without progress
	steps     int           // taken in this run

	// The clock counts from step warmupSteps on, without evaluations and
	// checkpoints; countStart is zero while it is stopped.
	counted    int // tokens of this rank within counting
	counting   time.Duration
	countStart time.Time

	lossSum   float64 // of this interval's steps on this rank
	lossSteps int
	lr        float64 // after the last step
	trainLoss float64 // of the last interval, mean over ranks
	valLoss   float64 // of the last evaluation (rank 0)

	rec    *metrics.Recorder // nil without metrics or a trace (observe.go)
	recSt  *metrics.Step
	recErr error
	opt    optim.Optimizer
	stepLR float64 // the rate the recorded step trains at
}

// newMeter meters j's loop. With cfg.Progress every rank reports, in
// tokens, to cfg.Reporter or to progress.FromEnv's.
func newMeter(j *job) *meter {
	m := &meter{pg: j.pg, world: j.world, rank: j.rank, every: j.cfg.EvalEvery, out: j.cfg.Out}
	m.intervals = (j.cfg.MaxSteps + m.every - 1) / m.every
	if j.cfg.Progress {
		m.rep = j.cfg.Reporter
		if m.rep == nil {
			m.rep = progress.FromEnv(progress.Output(j.cfg.Out), progress.Rank(j.rank), progress.Tokens())
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

// startEpoch starts a pass over the training windows (counting from 0):
// the next step's data phase starts now.
func (m *meter) startEpoch(epoch int) {
	if m.rec != nil {
		m.rec.StartEpoch(epoch)
	}
}

// startStep marks the start of a step: at the end of the warm-up it lines
// the ranks up and starts the clock.
func (m *meter) startStep(ctx context.Context) error {
	if m.steps == warmupSteps {
		if m.pg != nil {
			if err := m.pg.Barrier(ctx); err != nil {
				return err
			}
		}
		m.countStart, m.counted, m.counting = time.Now(), 0, 0
	}
	if m.rec != nil {
		m.recSt = m.rec.Begin()
	}
	return nil
}

// forwarded marks the end of the forward pass (and the loss).
func (m *meter) forwarded() {
	if m.recSt != nil {
		m.recSt.Forwarded()
	}
}

// backwarded marks the end of backward, gradients reduced, and notes the
// rate the optimizer is about to step at (the schedule moves it on after
// each step).
func (m *meter) backwarded() {
	if m.recSt != nil {
		m.recSt.Backwarded()
		m.stepLR = m.opt.LR()
	}
}

// stepped marks the end of the optimizer step (counting from 1) over
// tokens tokens with this rank's loss, and records the rate the schedule
// set for the next one; the first step of an interval opens its bar. A
// metrics row counts the tokens as its samples.
func (m *meter) stepped(loss float64, tokens int, lr float64, step int) {
	if m.rep != nil && m.bar == nil {
		k := (step - 1) / m.every
		m.bar = m.rep.Epoch(k, m.intervals, min(m.every, m.intervals*m.every-k*m.every))
	}
	m.steps++
	m.counted += tokens
	m.lossSum += loss
	m.lossSteps++
	m.lr = lr
	if m.bar != nil {
		m.bar.Step(tokens, progress.Loss(loss))
	}
	if m.recSt != nil {
		if err := m.recSt.End(tokens, loss, m.stepLR); err != nil && m.recErr == nil {
			m.recErr = err
		}
	}
}

// evaluated ends an interval at step: the interval's training loss
// averaged over the ranks, rank 0's validation loss from eval (outside the
// clock, a span of the timeline), and the report of both with the
// learning rate.
func (m *meter) evaluated(ctx context.Context, step int, eval func() float64) error {
	mean := []float64{m.lossSum / float64(max(m.lossSteps, 1))}
	if m.pg != nil {
		if err := m.pg.AllReduce(ctx, mean, distributed.Avg); err != nil {
			return err
		}
	}
	m.trainLoss, m.lossSum, m.lossSteps = mean[0], 0, 0
	if m.rank == 0 {
		_ = m.untimed("evaluate", func() error { m.valLoss = eval(); return nil })
	}
	switch {
	case m.bar != nil && m.rank == 0:
		m.bar.Done(progress.Loss(m.trainLoss), progress.Metric("val_loss", m.valLoss), progress.Metric("lr", m.lr))
	case m.bar != nil:
		m.bar.Done(progress.Loss(m.trainLoss))
	case m.rank == 0:
		fmt.Fprintf(m.out, "step %d: train_loss=%.4f val_loss=%.4f lr=%.3g\n", step, m.trainLoss, m.valLoss, m.lr)
	}
	m.bar = nil
	return nil
}

// untimed runs f (an evaluation, a checkpoint) with the clock paused; the
// timeline shows it as a span named name.
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
	return err
}

// finish stops the clock once the slowest rank is done.
func (m *meter) finish(ctx context.Context) error {
	if m.countStart.IsZero() {
		return nil
	}
	if m.pg != nil {
		if err := m.pg.Barrier(ctx); err != nil {
			return err
		}
	}
	m.counting += time.Since(m.countStart)
	m.countStart = time.Time{}
	return nil
}

// summarise adds the run's throughput, steps, losses and peak RSS to res.
func (m *meter) summarise(res Result) Result {
	if m.counting > 0 {
		res.TokensPerSec = float64(m.counted*m.world) / m.counting.Seconds()
	}
	res.Steps = m.steps
	res.TrainLoss, res.ValLoss = m.trainLoss, m.valLoss
	res.PeakRSSMiB = peakRSSMiB()
	return res
}
