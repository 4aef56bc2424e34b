package harness

import (
	"context"
	"fmt"
	"math"
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

// total is the profile's step time.
func (p Profile) total() time.Duration { return p.Data + p.Forward + p.Backward + p.Optimizer }

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
	plan  plan
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
	// early is the same clock from the end of the first step on: the
	// throughput of a run too short for the warm-up to leave any step.
	early clock

	prof       Profile // sums over profiled steps
	profiled   int
	dataStart  time.Time // when the loop asked for the next batch
	t0, t1, t2 time.Time // step start, forward done, backward done
	before     ddp.Stats

	bar       *progress.Bar // the epoch's or interval's; nil without progress
	intervals int           // evaluation intervals in all, with an EvalEvery
	lossSum   float64       // of the epoch's or interval's steps on this rank
	lossSteps int
	// nan is Train's watch over non-finite steps (nil outside Train): a
	// step it skipped (Config.OnNaN skip) has its loss in no mean, and
	// lossSkipped counts the period's such steps.
	nan         *guard
	lossSkipped int

	rec    *metrics.Recorder // nil without metrics or a trace
	recSt  *metrics.Step
	recErr error
	lr     float64 // the rate the recorded step trains at
}

// clock is a throughput clock: samples counted over the time it ran.
type clock struct {
	counted  int
	counting time.Duration
	start    time.Time // zero while stopped
}

// plan is what the meter knows of the loop ahead.
type plan struct {
	epochs    int            // at least 1
	perEpoch  int            // this rank's steps per epoch
	evalEvery int            // 0: a bar per epoch
	done      int            // steps taken before this run (a resume)
	total     int            // the steps the run ends at, counting done ones
	tokens    bool           // n counts tokens
	lr        func() float64 // the rate the next step trains at; nil: 0
}

// planOf is the plan of l's loop after a resume.
func planOf(l *Loop) plan {
	p := plan{epochs: max(l.Epochs, 1), perEpoch: l.Data.Len(), evalEvery: l.EvalEvery,
		done: int(l.State.Step), total: l.planned(), tokens: l.Tokens, lr: l.State.Optimizer.LR}
	if l.MaxSteps > 0 {
		p.total = min(p.total, p.done+l.MaxSteps)
	}
	return p
}

// newMeter meters a loop of plan p, with progress bars if the run
// reports progress, and a metrics recorder if it records metrics or a
// trace, or its launcher collects them (event.EnvObserve).
func (r *Run) newMeter(p plan) (*meter, error) {
	m := &meter{r: r, plan: p, pg: r.pg, dm: r.dm}
	rep := r.reporter(p.tokens)
	if r.cfg.Progress && rep != nil {
		m.rep = rep
		rep.Steps(p.done, p.total)
	}
	if p.evalEvery > 0 {
		m.intervals = (p.total + p.evalEvery - 1) / p.evalEvery
	}
	rec, err := metrics.New(metrics.Config{File: r.cfg.Metrics, Trace: r.cfg.Trace, Every: r.cfg.MetricsEvery,
		Rank: r.rank, Group: r.pg, Model: r.dm, Reporter: rep, Tokens: p.tokens})
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
	if m.rep != nil && m.plan.evalEvery == 0 {
		m.bar = m.rep.Epoch(epoch, m.plan.epochs, m.plan.perEpoch)
	}
	now := time.Now()
	if m.steps >= warmupSteps {
		m.countStart = now
	}
	if m.steps >= 1 {
		m.early.start = now
	}
	m.dataStart = now
}

// begin marks the start of step (counting from 1, resumed steps
// included). At the end of the warm-up it lines the ranks up and
// restarts the clock and the profile from zero; an evaluation interval's
// first step opens its bar.
func (m *meter) begin(ctx context.Context, step int) error {
	if every := m.plan.evalEvery; m.rep != nil && m.bar == nil && every > 0 {
		k := (step - 1) / every
		m.bar = m.rep.Interval(k, max(m.intervals, k+1), max(min(every, m.plan.total-k*every), 1))
	}
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
		m.lr = 0
		if m.plan.lr != nil {
			m.lr = m.plan.lr()
		}
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

// end marks the end of the step over n samples with this rank's loss,
// and adds it to the profile, the bar and the metrics.
func (m *meter) end(loss float64, n int) {
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
	if m.steps == 1 {
		m.early.start = now // the first step's time holds the start-up
	} else {
		m.early.counted += n
	}
	m.lossSteps++
	fields := []progress.Field{progress.Loss(loss)}
	if m.nan != nil && m.nan.skipped {
		m.lossSkipped++
		fields = nil
	} else {
		m.lossSum += loss
	}
	if m.bar != nil {
		m.bar.Step(n, fields...)
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
	if !m.early.start.IsZero() {
		m.early.start = m.early.start.Add(pause)
	}
	m.dataStart = m.dataStart.Add(pause)
	return err
}

// stopClock stops the clocks once the slowest rank is done.
func (m *meter) stopClock(ctx context.Context) error {
	if m.countStart.IsZero() && m.early.start.IsZero() {
		return nil
	}
	if m.pg != nil {
		if err := m.pg.Barrier(ctx); err != nil {
			return err
		}
	}
	now := time.Now()
	if !m.countStart.IsZero() {
		m.counting += now.Sub(m.countStart)
		m.countStart = time.Time{}
	}
	if !m.early.start.IsZero() {
		m.early.counting += now.Sub(m.early.start)
		m.early.start = time.Time{}
	}
	return nil
}

// periodLoss returns the training loss of the epoch or interval ending:
// the mean over its steps of every rank's mean loss, the same on every
// rank. The next one starts from zero.
func (m *meter) periodLoss(ctx context.Context) (float64, error) {
	mean := []float64{m.lossSum / float64(max(m.lossSteps-m.lossSkipped, 1))}
	if m.lossSteps > 0 && m.lossSkipped == m.lossSteps {
		mean[0] = math.NaN() // every step skipped: no loss to average
	}
	m.lossSum, m.lossSteps, m.lossSkipped = 0, 0, 0
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
// to s. A run too short for the warm-up to leave a step is measured over
// its steps after the first, and says so; a run of one step over that
// step.
func (m *meter) summarise(s Stats) Stats {
	s.ThroughputFrom = warmupSteps + 1
	switch {
	case m.counting > 0:
		s.Throughput = float64(m.counted*m.r.world) / m.counting.Seconds()
	case m.early.counting > 0 && m.early.counted > 0:
		s.Throughput = float64(m.early.counted*m.r.world) / m.early.counting.Seconds()
		s.ThroughputFrom = 2
		if m.r.rank == 0 {
			m.r.log.Info(fmt.Sprintf("throughput measured over steps 2-%d: the run is shorter than the %d-step warm-up", m.steps, warmupSteps))
		}
	case m.steps == 1 && m.prof.total() > 0:
		s.Throughput = float64(m.counted*m.r.world) / m.prof.total().Seconds()
		s.ThroughputFrom = 1
		if m.r.rank == 0 {
			m.r.log.Info("throughput measured over the only step, start-up included")
		}
	}
	s.Steps = m.steps
	if n := time.Duration(m.profiled); n > 0 {
		p := m.prof
		s.Profile = Profile{p.Data / n, p.Forward / n, p.Backward / n, p.ExposedAllReduce / n, p.Optimizer / n, p.AllReduce / n}
	}
	s.PeakRSSMiB = peakRSSMiB()
	return s
}
