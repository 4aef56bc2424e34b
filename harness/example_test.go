package harness_test

import (
	"context"
	"io"
	"os"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// classifier is a Task: a model, its optimizer, its loss and how well
// it does on held-out points.
type classifier struct {
	run   *harness.Run
	model harness.Model // the module, or its DDP wrapper
	opt   optim.Optimizer
	test  *data.TensorDataset
	acc   float64
}

// Step is the PyTorch training step.
func (c *classifier) Step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
	c.opt.ZeroGrad()
	var loss *tensor.Tensor
	c.run.Autocast(func() { loss = nn.CrossEntropy(c.model.Forward(b.X), b.Y) })
	s.Forwarded()
	if err := loss.Backward(); err != nil {
		return 0, err
	}
	s.Backwarded()
	c.opt.Step()
	return float64(loss.Item()), nil
}

// Evaluate is the accuracy on the test points.
func (c *classifier) Evaluate(ctx context.Context) ([]harness.Metric, error) {
	correct := 0
	loader := data.NewLoader(c.test, 64, data.NewSequentialSampler(c.test.Len()))
	tensor.NoGrad(func() {
		for b := range loader.Batches() {
			for i, p := range tensor.ArgMax(c.model.Forward(b.X), 1) {
				if p == b.Y[i] {
					correct++
				}
			}
		}
	})
	c.acc = float64(correct) / float64(c.test.Len())
	return []harness.Metric{{Name: "test_acc", Value: c.acc}}, nil
}

// points are n points of two classes: around (-2, -2) and around (2, 2).
func points(n int, seed uint64) *data.TensorDataset {
	rng := tensor.NewRNG(seed)
	x, y := make([]float32, 2*n), make([]int, n)
	for i := range n {
		y[i] = i % 2
		for d := range 2 {
			x[2*i+d] = float32(4*y[i]-2) + rng.Normal()
		}
	}
	return data.NewTensorDataset(tensor.New(x, n, 2), y)
}

// A classifier trained with the harness: alone here, and as is under
// `gotrain run --nproc-per-node 4` on four ranks.
func Example() {
	ctx := context.Background()
	r, err := harness.Start(ctx, harness.Config{Out: io.Discard, Summary: os.Stdout})
	if err != nil {
		panic(err)
	}
	defer r.Close()

	nn.SetSeed(1) // the same initial weights on every rank
	model := nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))
	m, err := r.Wrap(ctx, model)
	if err != nil {
		panic(err)
	}
	train := points(512, 2)
	sampler := data.NewDistributedSampler(train.Len(), r.World(), r.Rank(), data.Seed(1))
	opt := optim.NewSGD(m.Parameters(), 0.1, optim.Momentum(0.9))
	task := &classifier{run: r, model: m, opt: opt, test: points(256, 3)}
	stats, err := r.Train(ctx, task, harness.Loop{
		Data:    data.NewLoader(train, 32, sampler),
		Sampler: sampler,
		State:   &checkpoint.TrainingState{Model: model, Optimizer: opt},
		Epochs:  2,
	})
	if err != nil {
		panic(err)
	}

	var s event.Summary
	s.Add("world", "%d", stats.World)
	s.Add("epochs", "%d", stats.Epochs)
	s.Add("steps", "%d", stats.Steps)
	s.Add("learned", "%t", task.acc > 0.95)
	if err := r.Report(s); err != nil {
		panic(err)
	}
	// Output:
	// world=1 epochs=2 steps=32 learned=true
}
