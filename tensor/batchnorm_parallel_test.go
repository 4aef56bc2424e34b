package tensor

import (
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestBatchNormThreadsAgree checks that BatchNorm spread over two threads
// (channels, and rows of the normalisation, on separate goroutines) gives
// bit for bit the one-thread output, running statistics and gradients,
// in training and in eval.
func TestBatchNormThreadsAgree(t *testing.T) {
	shape := []int{3, 160, 17, 19}
	bn := batchNormGeom{n: 3, c: 160, s: 17 * 19}
	prev := kernels.SetNumThreads(2)
	stats, grads := parallelWorkers(bn.blocks(bn.channelBlock(1))), parallelWorkers(bn.blocks(bn.channelBlock(4)))
	rows := parallelWorkers(bn.n*bn.c, poolMinItems/bn.s+1)
	kernels.SetNumThreads(prev)
	if stats < 2 || grads < 2 || rows < 2 {
		t.Fatalf("shape %v does not split over 2 threads (%d, %d and %d workers)", shape, stats, grads, rows)
	}
	for _, training := range []bool{true, false} {
		type result struct{ out, rm, rv, gx, gw, gb []float32 }
		run := func(threads int) result {
			defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
			rng := NewRNG(3)
			x := randT(rng, -2, 3, shape...).SetRequiresGrad(true)
			w := randT(rng, 0.5, 1.5, shape[1]).SetRequiresGrad(true)
			b := randT(rng, -1, 1, shape[1]).SetRequiresGrad(true)
			rm, rv := randT(rng, -1, 1, shape[1]), randT(rng, 0.5, 2, shape[1])
			y := BatchNorm(x, w, b, rm, rv, training, 0.1, 1e-5)
			if err := Sum(Mul(y, randT(rng, -1, 1, shape...)), false).Backward(); err != nil {
				t.Fatal(err)
			}
			return result{y.Data(), rm.Data(), rv.Data(), x.Grad().Data(), w.Grad().Data(), b.Grad().Data()}
		}
		one, two := run(1), run(2)
		for _, p := range []struct {
			what string
			a, b []float32
		}{{"output", one.out, two.out}, {"running mean", one.rm, two.rm}, {"running var", one.rv, two.rv},
			{"input grad", one.gx, two.gx}, {"weight grad", one.gw, two.gw}, {"bias grad", one.gb, two.gb}} {
			if !slices.Equal(p.a, p.b) {
				t.Errorf("training=%v: %s differs between 1 and 2 threads", training, p.what)
			}
		}
	}
}
