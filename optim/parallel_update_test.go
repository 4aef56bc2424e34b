package optim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/tensor"
)

// TestStepSameBitsAnyThreads checks that an update split over threads
// gives the same bits as one pass, for every optimizer (with the options
// that take the scratch and momentum paths), on parameters below, at and
// above the split size, with lengths off the vector width.
func TestStepSameBitsAnyThreads(t *testing.T) {
	sizes := []int{33, updateSplitMin, 2*updateSplitMin + 13, 5*updateSplitMin + 61}
	cases := []struct {
		name string
		opt  func([]*tensor.Tensor) Optimizer
	}{
		{"SGD", func(p []*tensor.Tensor) Optimizer { return NewSGD(p, 0.1) }},
		{"SGDMomentum", func(p []*tensor.Tensor) Optimizer { return NewSGD(p, 0.1, Momentum(0.9)) }},
		{"SGDNesterovDecay", func(p []*tensor.Tensor) Optimizer {
			return NewSGD(p, 0.1, Momentum(0.9), Nesterov(true), WeightDecay(0.01))
		}},
		{"Adam", func(p []*tensor.Tensor) Optimizer { return NewAdam(p, 1e-3, WeightDecay(0.01)) }},
		{"AdamW", func(p []*tensor.Tensor) Optimizer { return NewAdamW(p, 1e-3, WeightDecay(0.1)) }},
		{"Adadelta", func(p []*tensor.Tensor) Optimizer { return NewAdadelta(p, 1) }},
	}
	run := func(threads int, newOpt func([]*tensor.Tensor) Optimizer) [][]float32 {
		prev := kernels.SetNumThreads(threads)
		defer kernels.SetNumThreads(prev)
		rng := rand.New(rand.NewPCG(3, 4))
		params := make([]*tensor.Tensor, len(sizes))
		for i, n := range sizes {
			params[i] = tensor.New(randFloats(rng, n), n).SetRequiresGrad(true)
		}
		opt := newOpt(params)
		for range 3 {
			for _, p := range params {
				p.SetGrad(tensor.New(randFloats(rng, p.Len()), p.Len()))
			}
			opt.Step()
		}
		out := make([][]float32, len(params))
		for i, p := range params {
			out[i] = append([]float32(nil), p.Data()...)
		}
		return out
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			one := run(1, c.opt)
			for _, threads := range []int{2, 3} {
				got := run(threads, c.opt)
				for i := range one {
					for j := range one[i] {
						if math.Float32bits(got[i][j]) != math.Float32bits(one[i][j]) {
							t.Fatalf("threads=%d param %d (len %d) element %d: %v, one thread %v",
								threads, i, len(one[i]), j, got[i][j], one[i][j])
						}
					}
				}
			}
		})
	}
}
