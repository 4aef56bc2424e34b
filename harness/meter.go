package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/metrics"
	"github.com/gotrain/gotrain/progress"
)

// warmupSteps are left out of the throughput and the profile, as in the
// PyTorch reference scripts.
const warmupSteps = 5

// Profile is the mean time per step spent in each phase.
type Profile struct {
	Data, Forward, Backward, ExposedAllReduce, Optimizer time.Duration
	// AllReduce is the whole time spent reducing gradients, hidden by
	// backward or not.
	AllReduce time.Duration
}

// String is the profile line Config.Profile prints.
func (p Profile) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }
	return fmt.Sprintf("profile per step: data_ms=%s forward_ms=%s backward_ms=%s (of which exposed_allreduce_wait_ms=%s) optimizer_ms=%s allreduce_total_ms=%s",
		ms(p.Data), ms(p.Forward), ms(p.Backward), ms(p.ExposedAllReduce), ms(p.Optimizer), ms(p.AllReduce))
}

// meter is Train's bookkeeping, kept out of the step's way: the
// throughput clock, the per-phase profile, the losses of the current
// epoch or evaluation interval, the progress bars and the metrics
// recorder. Train calls begin and end around each step, the Task's Step
// marks forwarded and backwarded.
type meter struct {
	r     *Run
	l     *Loop
	pg    *distributed.Group // nil alone: no ranks to line up
	dm    *ddp.Model         // nil alone: no allreduce to profile
	rep   *progress.Reporter // nil without progress bars
	steps int                // taken in this run

	// The clock counts training time from step warmupSteps on, without
	// evaluations and checkpoints (as the PyTorch scripts stop theirs
	// before evaluating); countStart is zero while it is stopped.
	counted    int // samples (or tokens) of this rank within counting
	counting   time.Duration
	countStart time.Time

	prof       Profile // sums over profiled steps
	profiled   int
	dataStart  time.Time // when the loop asked for the next batch
	t0, t1, t2 time.Time // step start, forward done, backward done
	before     ddp.Stats

	bar                *progress.Bar // the epoch's or interval's; nil without progress
	intervals, planned int           // evaluation intervals and steps in all, with Loop.EvalEvery
	lossSum            float64       // of the epoch's or interval's steps on this rank
	lossSteps          int

	rec    *metrics.Recorder // nil without metrics or a trace
	recSt  *metrics.Step
	recErr error
	lr     float64 // the rate the recorded step trains at
}

// newMeter meters l's loop, with progress bars if the run reports
// progress, and a metrics recorder if it records metrics or a trace, or
// its launcher collects them (event.EnvObserve).
func (r *Run) newMeter(l *Loop) (*meter, error) {
	m := &meter{r: r, l: l, pg: r.pg, dm: r.dm}
	rep := r.reporter(l.Tokens)
	if r.cfg.Progress {
		m.rep = rep
	}
	if l.EvalEvery > 0 {
		m.planned = l.planned()
		m.intervals = (m.planned + l.EvalEvery - 1) / l.EvalEvery
	}
	rec, err := metrics.New(metrics.Config{File: r.cfg.Metrics, Trace: r.cfg.Trace, Every: r.cfg.MetricsEvery,
		Rank: r.rank, Group: r.pg, Model: r.dm, Reporter: rep})
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	if rec.Active() {
		m.rec = rec
	} else {
		_ = rec.Close() // records nowhere: spare the loop its clock reads
	}
	return m, nil
}

// close closes the recorder after a failed step, keeping what it has.
func (m *meter) close() {
	if m.rec != nil {
		_ = m.rec.Close()
	}
}

// startEpoch starts an epoch (counting from 0): its bar when each epoch
// has one, and the clock once the warm-up is over.
func (m *meter) startEpoch(epoch int) {
	if m.rec != nil {
		m.rec.StartEpoch(epoch)
	}
	if m.rep != nil && m.l.EvalEvery == 0 {
		m.bar = m.rep.Epoch(epoch, max(m.l.Epochs, 1), m.l.Data.Len())
	}
	now := time.Now()
	if m.steps >= warmupSteps {
		m.countStart = now
	}
	m.dataStart = now
}

// begin marks the start of a step. At the end of the warm-up it lines
// the ranks up and restarts the clock and the profile from zero.
func (m *meter) begin(ctx context.Context) error {
	if m.steps == warmupSteps {
		if m.pg != nil {
			if err := m.pg.Barrier(ctx); err != nil {
				return err
			}
		}
		m.countStart, m.counted, m.counting = time.Now(), 0, 0
		m.prof, m.profiled = Profile{}, 0
	}
	m.t0, m.t1, m.t2 = time.Now(), time.Time{}, time.Time{}
	if m.dm != nil {
		m.before = m.dm.Stats()
	}
	if m.rec != nil {
		m.recSt = m.rec.Begin()
		m.lr = m.l.State.Optimizer.LR()
	}
	return nil
}

// forwarded marks the end of the forward pass and the loss.
func (m *meter) forwarded() {
	m.t1 = time.Now()
	if m.recSt != nil {
		m.recSt.Forwarded()
	}
}

// backwarded marks the end of backward, the gradients averaged.
func (m *meter) backwarded() {
	m.t2 = time.Now()
	if m.recSt != nil {
		m.recSt.Backwarded()
	}
}

// end marks the end of step (counting from 1, resumed steps included)
// over n samples with this rank's loss, and adds it to the profile, the
// bar and the metrics; an evaluation interval's first step opens its bar.
func (m *meter) end(loss float64, n, step int) {
	now := time.Now()
	if m.t1.IsZero() {
		m.t1 = m.t0
	}
	if m.t2.IsZero() {
		m.t2 = m.t1
	}
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
	m.lossSum += loss
	m.lossSteps++
	if m.rep != nil && m.bar == nil && m.l.EvalEvery > 0 {
		every := m.l.EvalEvery
		k := (step - 1) / every
		m.bar = m.rep.Epoch(k, m.intervals, min(every, m.planned-k*every))
	}
	if m.bar != nil {
		m.bar.Step(n, progress.Loss(loss))
	}
	if m.recSt != nil {
		if err := m.recSt.End(n, loss, m.lr); err != nil && m.recErr == nil {
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

// stopClock stops the clock once the slowest rank is done.
func (m *meter) stopClock(ctx context.Context) error {
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

// periodLoss returns the training loss of the epoch or interval ending:
// the mean over its steps of every rank's mean loss, the same on every
// rank. The next one starts from zero.
func (m *meter) periodLoss(ctx context.Context) (float64, error) {
	mean := []float64{m.lossSum / float64(max(m.lossSteps, 1))}
	m.lossSum, m.lossSteps = 0, 0
	if m.pg != nil {
		if err := m.pg.AllReduce(ctx, mean, distributed.Avg); err != nil {
			return 0, err
		}
	}
	return mean[0], nil
}

// report ends the bar of the epoch or interval, the n-th epoch or at
// step n (label says which), with its loss and rank 0's metrics; without
// progress rank 0 prints its line itself.
func (m *meter) report(label string, n int, loss float64, ms []Metric) {
	switch {
	case m.bar != nil:
		fields := []progress.Field{progress.Loss(loss)}
		for _, x := range ms {
			fields = append(fields, progress.Metric(x.Name, x.Value))
		}
		m.bar.Done(fields...)
	case m.r.rank == 0:
		var b strings.Builder
		fmt.Fprintf(&b, "%s %d: train_loss=%.4f", label, n, loss)
		for _, x := range ms {
			format := x.Format
			if format == "" {
				format = "%.4f"
			}
			fmt.Fprintf(&b, " %s="+format, x.Name, x.Value)
		}
		b.WriteByte('\n')
		_, _ = m.r.lines.Write([]byte(b.String()))
	}
	m.bar = nil
}

// closeMetrics flushes the metrics and the trace and returns the first
// error recording them.
func (m *meter) closeMetrics() error {
	if m.rec == nil {
		return nil
	}
	err := m.rec.Close()
	m.rec, m.recSt = nil, nil
	if m.recErr != nil {
		err = m.recErr
	}
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// summarise adds the run's throughput, steps, mean profile and peak RSS
// to s.
func (m *meter) summarise(s Stats) Stats {
	if m.counting > 0 {
		s.Throughput = float64(m.counted*m.r.world) / m.counting.Seconds()
	}
	s.Steps = m.steps
	if n := time.Duration(m.profiled); n > 0 {
		p := m.prof
		s.Profile = Profile{p.Data / n, p.Forward / n, p.Backward / n, p.ExposedAllReduce / n, p.Optimizer / n, p.AllReduce / n}
	}
	s.PeakRSSMiB = peakRSSMiB()
	return s
}
