package harness

import (
	"context"
	"fmt"
)

// evaluate runs task's evaluation at the end of a period: on rank 0
// alone, or under sharding on every rank, the model sharded (see
// WithModel). The metrics are rank 0's; the other ranks return none.
func (r *Run) evaluate(ctx context.Context, task Task) ([]Metric, error) {
	if r.fm == nil {
		if r.rank != 0 {
			return nil, nil
		}
		return task.Evaluate(ctx)
	}
	var metrics []Metric
	err := r.WithModel(ctx, func() error {
		var err error
		metrics, err = task.Evaluate(ctx)
		return err
	})
	if r.rank != 0 {
		metrics = nil
	}
	return metrics, err
}

// WithModel runs f, which uses the model Wrap was given (the module
// itself, not the wrapper) outside the training steps: an evaluation of
// the program's own, sampling. Under Config.Sharding no rank holds the
// whole model, before, during or after Train: every rank must call
// WithModel and run the same forward passes of the module in f, with
// autograd off, each unit gathered from the shards just before its
// forward pass and freed after it, as in training (fsdp.Model.Evaluate).
// Otherwise WithModel runs f on the rank that calls it. It returns f's
// error, or the error of a gather (a failed peer).
func (r *Run) WithModel(ctx context.Context, f func() error) error {
	if r.fm == nil {
		return f()
	}
	var ferr error
	err := r.fm.Evaluate(ctx, func() error {
		ferr = f()
		return ferr
	})
	if err != nil && err != ferr {
		return fmt.Errorf("harness: running the sharded model: %w", err)
	}
	return err
}
