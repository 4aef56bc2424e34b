package ddp

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// BenchmarkJoinEvenInputs is the cost of Join when no rank runs out
// early: one MLP training step (batch 64 per rank) on 2 ranks in this
// process over a loopback TCP group, without Join ("plain") and inside
// Join ("join"), in the same run. Join adds one 3-float allreduce per
// step; the target is at most 2% on the step time.
//
//	go test ./ddp -run '^$' -bench BenchmarkJoinEvenInputs -benchtime 200x -count 5
func BenchmarkJoinEvenInputs(b *testing.B) {
	for _, join := range []bool{false, true} {
		name := "plain"
		if join {
			name = "join"
		}
		b.Run(name, func(b *testing.B) { benchJoinSteps(b, join) })
	}
}

func benchJoinSteps(b *testing.B, join bool) {
	const world, batch = 2, 64
	srv, err := store.Listen("127.0.0.1:0", []byte(testToken))
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	addr := srv.Addr().String()
	ctx := context.Background()
	type rank struct {
		g   *distributed.Group
		dm  *Model
		opt optim.Optimizer
		x   *tensor.Tensor
		y   []int
	}
	ranks := make([]rank, world)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := distributed.Init(ctx, distributed.Config{InitMethod: "tcp://" + addr, Rank: r, WorldSize: world,
				Token: testToken, JobID: strings.ReplaceAll(b.Name(), "/", "-"), AgentStore: true,
				Logger: slog.New(slog.DiscardHandler)}) // keep the benchmark's lines parseable
			if err != nil {
				b.Error(err)
				return
			}
			m := models.MLP()
			nn.ResetParameters(m, tensor.NewRNG(1))
			dm, err := New(ctx, m, g)
			if err != nil {
				b.Error(err)
				g.Destroy()
				return
			}
			y := make([]int, batch)
			for i := range y {
				y[i] = (i + r) % 10
			}
			ranks[r] = rank{g: g, dm: dm, opt: optim.NewSGD(dm.Parameters(), 0.01), x: tensor.Randn(tensor.NewRNG(uint64(r)), batch, 784), y: y}
		}()
	}
	wg.Wait()
	defer func() {
		for _, rk := range ranks {
			if rk.dm != nil {
				rk.dm.Close()
			}
			if rk.g != nil {
				rk.g.Destroy()
			}
		}
	}()
	if b.Failed() {
		b.FailNow()
	}
	b.ResetTimer()
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rk := ranks[r]
			loop := func(ctx context.Context) error {
				for i := 0; i < b.N; i++ {
					rk.opt.ZeroGrad()
					if err := nn.CrossEntropy(rk.dm.Forward(rk.x), rk.y).Backward(); err != nil {
						return err
					}
					rk.opt.Step()
				}
				return nil
			}
			var err error
			if join {
				err = rk.dm.Join(ctx, loop)
			} else {
				err = loop(ctx)
			}
			if err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}
