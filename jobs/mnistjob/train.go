package mnistjob

import (
	"context"
	"fmt"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// train trains from the resumed epoch on, until cfg.Epochs or MaxSteps, and
// returns the run's summary.
func (j *job) train(ctx context.Context) (Result, error) {
	m := newMeter(j)
	defer m.close()
	if err := m.openMetrics(j); err != nil {
		return Result{}, err
	}
	res := Result{Model: j.cfg.Model, World: j.world, Rank: j.rank}
	nn.SetTrain(j.model, true)
	for epoch := j.ckpt.Epoch; epoch < j.cfg.Epochs; epoch++ {
		j.sampler.SetEpoch(epoch) // keeps a resumed position within this epoch
		stopped, err := j.trainEpoch(ctx, epoch, m)
		if err != nil {
			return res, err
		}
		if err := j.endEpoch(ctx, epoch, stopped, m, &res); err != nil {
			return res, err
		}
		if stopped {
			break
		}
	}
	if err := m.closeMetrics(); err != nil {
		return res, err
	}
	res = m.summarise(res)
	if j.cfg.Profile && j.rank == 0 {
		fmt.Fprintln(m.out, res.Profile)
	}
	return res, nil
}

// trainEpoch is one pass over this rank's shard: the PyTorch DDP loop,
// with the meter noting where the time goes. It reports whether MaxSteps
// ended the pass early.
func (j *job) trainEpoch(ctx context.Context, epoch int, m *meter) (stopped bool, err error) {
	m.startEpoch(epoch, j.loader.Len())
	for batch := range j.loader.Batches() {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if err := m.startStep(ctx); err != nil {
			return false, err
		}
		j.opt.ZeroGrad()
		var loss *tensor.Tensor
		j.inPrecision(func() { loss = nn.CrossEntropy(j.forward(batch.X), batch.Y) })
		m.forwarded()
		// A failed allreduce (a dead peer) surfaces here, never as a hang.
		if err := loss.Backward(); err != nil {
			return false, err
		}
		m.backwarded()
		j.opt.Step()
		m.stepped(loss, len(batch.Y))

		j.ckpt.Step++
		if every := int64(j.cfg.SaveEvery); every > 0 && j.ckpt.Step%every == 0 {
			if err := j.untimedCheckpoint(m, epoch); err != nil {
				return false, err
			}
		}
		if j.cfg.MaxSteps > 0 && m.steps >= j.cfg.MaxSteps {
			return true, nil
		}
	}
	return false, nil
}

// endEpoch stops the clock once every rank is done, steps the schedule,
// evaluates on rank 0, reports the epoch's training loss and test
// accuracy, and checkpoints where a resumed run carries on: the next
// epoch, or this one if MaxSteps stopped it midway.
func (j *job) endEpoch(ctx context.Context, epoch int, stopped bool, m *meter, res *Result) error {
	if err := m.endEpoch(ctx); err != nil {
		return err
	}
	loss, err := m.epochLoss(ctx)
	if err != nil {
		return err
	}
	if j.sched != nil && !stopped {
		// A stopped epoch is not over: the resumed run finishes it and
		// steps the schedule then, once.
		j.sched.Step()
	}
	res.Epochs = epoch + 1
	if j.rank == 0 {
		_ = m.untimed("evaluate", func() error { res.TestAccuracy = j.evaluate(); return nil })
	}
	m.report(j.rank, epoch, loss, res.TestAccuracy)
	next := epoch + 1
	if stopped {
		next = epoch
	}
	return j.untimedCheckpoint(m, next)
}

// untimedCheckpoint checkpoints (on rank 0, with Save) outside the
// clock, as a span of the timeline.
func (j *job) untimedCheckpoint(m *meter, epoch int) error {
	if j.rank != 0 || j.cfg.Save == "" {
		return nil
	}
	return m.untimed("checkpoint", func() error { return j.checkpoint(epoch) })
}
