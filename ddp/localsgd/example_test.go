package localsgd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/ddp/localsgd"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// Example trains with DiLoCo on one rank (a file store, world size 1);
// `gotrain run --nproc-per-node N` runs the same program on N ranks with
// InitMethod "env://". The loop is DDP's with AfterStep after the
// optimizer step and a Sync at the end.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "diloco-example")
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
	opt := optim.NewAdamW(nn.Parameters(model), 0.01)
	// Sync every 8 steps, the parameters in 2 fragments sent as bf16.
	dl, err := localsgd.NewDiLoCo(ctx, model, pg, 8, localsgd.Fragments(2), localsgd.BF16(true), localsgd.InnerOptimizer(opt))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dl.Close()

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

	var first, last float32
	for epoch := 0; epoch < 10; epoch++ {
		sampler.SetEpoch(epoch)
		for batch := range loader.Batches() {
			opt.ZeroGrad()
			loss := nn.CrossEntropy(dl.Forward(batch.X), batch.Y)
			if err := loss.Backward(); err != nil {
				fmt.Println(err)
				return
			}
			opt.Step()
			if err := dl.AfterStep(ctx); err != nil {
				fmt.Println(err)
				return
			}
			if first == 0 {
				first = loss.Item()
			}
			last = loss.Item()
		}
	}
	if err := dl.Sync(ctx); err != nil {
		fmt.Println(err)
		return
	}
	st := dl.Stats()
	fmt.Printf("%d steps, %d fragment syncs, %d bytes sent; loss fell below half: %v\n", dl.Step(), st.Syncs, st.SentBytes, last < first/2)
	// Output: 80 steps, 22 fragment syncs, 2508 bytes sent; loss fell below half: true
}
