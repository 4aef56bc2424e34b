package ddp_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// Example is the classic PyTorch DDP loop on one rank (a file store, world size 1);
// `gotrain run --nproc-per-node N` runs the same program on N ranks with
// InitMethod "env://".
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ddp-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	pg, err := distributed.Init(ctx, distributed.Config{InitMethod: "file://" + filepath.Join(dir, "store"), Rank: 0, WorldSize: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pg.Destroy()

	nn.SetSeed(1)
	model := nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
	dm, err := ddp.New(ctx, model, pg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dm.Close()

	// A toy task: is the sum of the four features positive?
	rng := tensor.NewRNG(7)
	x := tensor.Randn(rng, 256, 4)
	y := make([]int, 256)
	for i := range y {
		if s := x.Data()[4*i] + x.Data()[4*i+1] + x.Data()[4*i+2] + x.Data()[4*i+3]; s > 0 {
			y[i] = 1
		}
	}
	train := data.NewTensorDataset(x, y)
	sampler := data.NewDistributedSampler(train.Len(), pg.Size(), pg.Rank())
	loader := data.NewLoader(train, 32, sampler)
	opt := optim.NewSGD(dm.Parameters(), 0.1, optim.Momentum(0.9))

	var first, last float32
	for epoch := 0; epoch < 10; epoch++ {
		sampler.SetEpoch(epoch)
		for batch := range loader.Batches() {
			opt.ZeroGrad()
			loss := nn.CrossEntropy(dm.Forward(batch.X), batch.Y)
			if err := loss.Backward(); err != nil {
				fmt.Println(err)
				return
			}
			opt.Step()
			if epoch == 0 && first == 0 {
				first = loss.Item()
			}
			last = loss.Item()
		}
	}
	fmt.Printf("world %d, loss fell from above 0.5 to below 0.2: %v\n", pg.Size(), first > 0.5 && last < 0.2)
	// Output: world 1, loss fell from above 0.5 to below 0.2: true
}
