package harness

import (
	"context"
	"fmt"
)

// Plan is what a Reporter knows of a loop a program writes itself: how
// long it runs and what it counts.
type Plan struct {
	// Epochs is how many epochs the loop runs; 0 means 1.
	Epochs int
	// StepsPerEpoch is this rank's steps (batches) per epoch, as a
	// loader's Len; required.
	StepsPerEpoch int
	// Tokens counts End's n as tokens rather than samples.
	Tokens bool
	// LR, if set, gives the learning rate the next step trains at (an
	// optimizer's LR method) for the metrics rows.
	LR func() float64
}

// Reporter is the bookkeeping of Train for a loop a program writes
// itself: one call to End a step reports it to the progress display (a
// bar per epoch with the step of the run's total and its ETA), the
// metrics rows and the timeline (Config.Metrics and Trace, or the
// launcher's --metrics and --dashboard), and the throughput clock.
//
//	rep, err := r.Reporter(harness.Plan{Epochs: 5, StepsPerEpoch: loader.Len(), LR: opt.LR})
//	for epoch := range 5 {
//		rep.StartEpoch(epoch)
//		for b := range loader.Batches() {
//			s, err := rep.Begin(ctx) // the data phase ends here
//			... forward and loss; s.Forwarded(); backward; s.Backwarded(); opt.Step()
//			rep.End(b.Len(), float64(loss.Item()))
//		}
//		trainLoss, err := rep.EndEpoch(ctx, harness.Metric{Name: "test_acc", Value: acc})
//	}
//	stats, err := rep.Close()
//
// A Reporter is for the goroutine that trains; a Run has one at a time.
type Reporter struct {
	m      *meter
	epoch  int
	closed bool
}

// Reporter starts the reporting of a loop of plan p. Its error is the
// metrics files'.
func (r *Run) Reporter(p Plan) (*Reporter, error) {
	if p.StepsPerEpoch < 1 || p.Epochs < 0 {
		panic(fmt.Sprintf("harness: Reporter: Plan with StepsPerEpoch %d, Epochs %d: want at least 1 step and epochs >= 0", p.StepsPerEpoch, p.Epochs))
	}
	epochs := max(p.Epochs, 1)
	m, err := r.newMeter(plan{epochs: epochs, perEpoch: p.StepsPerEpoch, total: epochs * p.StepsPerEpoch, tokens: p.Tokens, lr: p.LR})
	if err != nil {
		return nil, err
	}
	return &Reporter{m: m}, nil
}

// StartEpoch starts epoch (counting from 0): its progress bar and, past
// the warm-up, the throughput clock.
func (rp *Reporter) StartEpoch(epoch int) {
	rp.epoch = epoch
	rp.m.startEpoch(epoch)
}

// Begin starts a step: the time since the last step's end was its data
// phase. At the end of the warm-up (the first 5 steps) it lines the ranks
// up, so every rank calls it; its error is the group's.
func (rp *Reporter) Begin(ctx context.Context) (Step, error) {
	if err := rp.m.begin(ctx, rp.m.steps+1); err != nil {
		return Step{}, err
	}
	return Step{m: rp.m}, nil
}

// End ends the step begun last, over n samples (or tokens) with this
// rank's loss: the one call that reports it to the progress bar, the
// metrics rows and the throughput clock.
func (rp *Reporter) End(n int, loss float64) {
	rp.m.end(loss, n)
}

// EndEpoch ends the epoch: it stops the clock once every rank is done,
// averages the ranks' losses (so every rank calls it) and reports that
// training loss with rank 0's metrics (ms, which other ranks may leave
// out) on the progress display, or as rank 0's line without one. It
// returns the training loss.
func (rp *Reporter) EndEpoch(ctx context.Context, ms ...Metric) (float64, error) {
	if err := rp.m.stopClock(ctx); err != nil {
		return 0, err
	}
	loss, err := rp.m.periodLoss(ctx)
	if err != nil {
		return 0, err
	}
	rp.m.report("epoch", rp.epoch+1, loss, ms)
	return loss, nil
}

// Close ends the reporting: it flushes the metrics and the trace and
// returns the run's figures (the throughput, steps, profile and peak
// memory; TrainLoss and Epochs are the loop's to know).
func (rp *Reporter) Close() (Stats, error) {
	if rp.closed {
		return Stats{}, nil
	}
	rp.closed = true
	stats := Stats{World: rp.m.r.world, Rank: rp.m.r.rank, Epochs: rp.epoch + 1}
	if err := rp.m.closeMetrics(); err != nil {
		return stats, err
	}
	return rp.m.summarise(stats), nil
}
