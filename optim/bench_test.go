package optim

import (
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// benchParams returns the MNIST MLP's parameter shapes (784-512-512-10,
// 669 706 values) with gradients set.
func benchParams() []*tensor.Tensor {
	shapes := [][]int{{512, 784}, {512}, {512, 512}, {512}, {10, 512}, {10}}
	ps := make([]*tensor.Tensor, len(shapes))
	for i, s := range shapes {
		p := tensor.Full(0.5, s...).SetRequiresGrad(true)
		p.SetGrad(tensor.Full(0.01, s...))
		ps[i] = p
	}
	return ps
}

func benchStep(b *testing.B, opt Optimizer, ps []*tensor.Tensor) {
	n := 0
	for _, p := range ps {
		n += p.Len()
	}
	b.SetBytes(int64(4 * n))
	b.ResetTimer()
	for b.Loop() {
		opt.Step()
	}
}

func BenchmarkSGDMomentumStep(b *testing.B) {
	ps := benchParams()
	benchStep(b, NewSGD(ps, 0.01, Momentum(0.9)), ps)
}

func BenchmarkAdamStep(b *testing.B) {
	ps := benchParams()
	benchStep(b, NewAdam(ps, 1e-3), ps)
}

func BenchmarkAdamWStep(b *testing.B) {
	ps := benchParams()
	benchStep(b, NewAdamW(ps, 1e-3), ps)
}

func BenchmarkAdadeltaStep(b *testing.B) {
	ps := benchParams()
	benchStep(b, NewAdadelta(ps, 1.0), ps)
}
