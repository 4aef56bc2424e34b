package harness_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
)

// A loop of the program's own, reported with one call a step: End sends
// the step to the progress display and the metrics rows (here rank 0's
// line per epoch, with Progress off).
func ExampleReporter() {
	ctx := context.Background()
	var lines strings.Builder
	r, err := harness.Start(ctx, harness.Config{Out: &lines})
	if err != nil {
		panic(err)
	}
	defer r.Close()

	nn.SetSeed(1)
	model := nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))
	m, err := r.Wrap(ctx, model)
	if err != nil {
		panic(err)
	}
	train := points(512, 2)
	sampler := data.NewDistributedSampler(train.Len(), r.World(), r.Rank(), data.Seed(1))
	loader := data.NewLoader(train, 32, sampler)
	opt := optim.NewSGD(m.Parameters(), 0.1, optim.Momentum(0.9))

	rep, err := r.Reporter(harness.Plan{Epochs: 2, StepsPerEpoch: loader.Len(), LR: opt.LR})
	if err != nil {
		panic(err)
	}
	for epoch := range 2 {
		sampler.SetEpoch(epoch)
		rep.StartEpoch(epoch)
		for b := range loader.Batches() {
			s, err := rep.Begin(ctx)
			if err != nil {
				panic(err)
			}
			opt.ZeroGrad()
			loss := nn.CrossEntropy(m.Forward(b.X), b.Y)
			s.Forwarded()
			if err := loss.Backward(); err != nil {
				panic(err)
			}
			s.Backwarded()
			opt.Step()
			rep.End(b.Len(), float64(loss.Item())) // the progress bar and the metrics row
		}
		if _, err := rep.EndEpoch(ctx); err != nil {
			panic(err)
		}
	}
	stats, err := rep.Close()
	if err != nil {
		panic(err)
	}
	fmt.Println("steps", stats.Steps, "measured", stats.Throughput > 0)
	for l := range strings.Lines(lines.String()) {
		fmt.Println(strings.SplitN(l, "=", 2)[0]) // the losses vary with the CPU's kernels
	}
	// Output:
	// steps 32 measured true
	// epoch 1: train_loss
	// epoch 2: train_loss
}
