package fsdp

import (
	"context"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// BenchmarkStep compares one AdamW training step of a GPT on 2
// in-process ranks under DDP and each strategy. Besides the time per step
// it reports rank 0's bytes of parameters, gradients and optimizer state
// after a step ("state-B/rank", computed) and the peak heap of the whole
// process, all ranks together ("peak-heap-B").
func BenchmarkStep(b *testing.B) {
	cfg := models.GPTConfig{VocabSize: 64, BlockSize: 32, NLayer: 4, NHead: 4, NEmbd: 64}
	for _, name := range []string{"ddp", "no_shard", "zero1", "zero2", "full"} {
		b.Run(name, func(b *testing.B) { benchStep(b, cfg, name) })
	}
}

func benchStep(b *testing.B, cfg models.GPTConfig, name string) {
	const world, B, T = 2, 4, 32
	store := "file://" + filepath.Join(b.TempDir(), "store")
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(world)
	done.Add(world)
	errs := make([]error, world)
	var stateBytes atomic.Int64
	var peak atomic.Uint64
	for rank := range world {
		go func() {
			defer done.Done()
			readied := false
			defer func() {
				if !readied {
					ready.Done()
				}
			}()
			ctx := context.Background()
			g, err := distributed.Init(ctx, distributed.Config{InitMethod: store, Rank: rank, WorldSize: world, Timeout: time.Minute})
			if err != nil {
				errs[rank] = err
				return
			}
			defer g.Destroy()
			buildMu.Lock()
			m := models.GPT(cfg)
			m.ResetParameters(tensor.NewRNG(1))
			buildMu.Unlock()
			var forward func(*tensor.Tensor) (*tensor.Tensor, error)
			var params []*tensor.Tensor
			var footprint func() int64
			if name == "ddp" {
				dm, err := ddp.New(ctx, m, g)
				if err != nil {
					errs[rank] = err
					return
				}
				defer dm.Close()
				forward = func(x *tensor.Tensor) (*tensor.Tensor, error) { return dm.Forward(x), nil }
				params = dm.Parameters()
				footprint = func() int64 {
					var n int64
					for _, p := range params {
						n += 4 * int64(p.Len())
						if g := p.Grad(); g != nil {
							n += 4 * int64(g.Len())
						}
					}
					return n
				}
			} else {
				s, _ := ParseStrategy(name)
				fm, err := New(ctx, m, g, Strategy(s))
				if err != nil {
					errs[rank] = err
					return
				}
				defer fm.Close()
				forward, params = fm.ForwardErr, fm.Parameters()
				footprint = func() int64 { f := fm.Footprint(); return f.Params + f.Grads }
			}
			opt := optim.NewAdamW(params, 1e-3)
			rng := tensor.NewRNG(uint64(rank + 1))
			ids, targets := make([]int, B*T), make([]int, B*T)
			for i := range ids {
				ids[i], targets[i] = rng.Intn(cfg.VocabSize), rng.Intn(cfg.VocabSize)
			}
			step := func() error {
				opt.ZeroGrad()
				out, err := forward(nn.IDTensor(ids, B, T))
				if err != nil {
					return err
				}
				if err := tensor.CrossEntropyIgnore(out, targets, models.IgnoreIndex, "mean").Backward(); err != nil {
					return err
				}
				opt.Step()
				return nil
			}
			if errs[rank] = step(); errs[rank] != nil { // warm-up: optimizer state exists
				return
			}
			readied = true
			ready.Done()
			<-start
			var ms runtime.MemStats
			for range b.N {
				if errs[rank] = step(); errs[rank] != nil {
					return
				}
				if rank == 0 {
					runtime.ReadMemStats(&ms)
					if ms.HeapAlloc > peak.Load() {
						peak.Store(ms.HeapAlloc)
					}
				}
			}
			if rank == 0 {
				n := footprint()
				for _, t := range opt.StateDict().Tensors {
					n += 4 * int64(t.Len())
				}
				stateBytes.Store(n)
			}
		}()
	}
	ready.Wait()
	b.ResetTimer()
	close(start)
	done.Wait()
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	b.ReportMetric(float64(stateBytes.Load()), "state-B/rank")
	b.ReportMetric(float64(peak.Load()), "peak-heap-B")
}
