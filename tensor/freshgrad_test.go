package tensor

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestFreshGradBuffers checks that ops which overwrite a fresh pass-local
// gradient buffer (gradDst) give the same input gradient as accumulating
// into a leaf's gradient, both when the op is the first to contribute to
// its non-leaf input's gradient (fresh) and when another consumer of that
// input has already added to it.
func TestFreshGradBuffers(t *testing.T) {
	rng := NewRNG(21)
	w := randT(rng, -1, 1, 5, 8)
	ops := []struct {
		name  string
		shape []int
		f     func(x *Tensor) *Tensor
	}{
		{"ReLU", []int{4, 30}, ReLU},
		{"MaxPool2d even", []int{2, 3, 6, 8}, func(x *Tensor) *Tensor { return MaxPool2d(x, [2]int{2, 2}, [2]int{2, 2}, [2]int{}) }},
		{"MaxPool2d odd", []int{2, 3, 5, 7}, func(x *Tensor) *Tensor { return MaxPool2d(x, [2]int{2, 2}, [2]int{2, 2}, [2]int{}) }},
		{"Dropout", []int{4, 30}, func(x *Tensor) *Tensor { return Dropout(x, 0.4, true, NewRNG(5)) }},
		{"Flatten", []int{2, 3, 4}, func(x *Tensor) *Tensor { return Flatten(x, 1) }},
		{"Linear", []int{3, 8}, func(x *Tensor) *Tensor { return Linear(x, w, nil) }},
	}
	for _, op := range ops {
		x := randT(rng, -1, 1, op.shape...)
		outShape := op.f(x).shape
		wy := randT(rng, -1, 1, outShape...)
		wx := randT(rng, -1, 1, op.shape...)
		grad := func(build func(x *Tensor) *Tensor) []float32 {
			x.SetRequiresGrad(true)
			x.SetGrad(nil)
			if err := build(x).Backward(); err != nil {
				t.Fatal(err)
			}
			return x.Grad().Clone().data
		}
		// Reference: the op on the leaf itself (accumulating path).
		leaf := grad(func(x *Tensor) *Tensor { return Sum(Mul(op.f(x), wy), false) })
		// The op's input is a non-leaf (MulScalar by 1) that nothing else
		// uses: its gradient buffer is fresh.
		fresh := grad(func(x *Tensor) *Tensor { return Sum(Mul(op.f(MulScalar(x, 1)), wy), false) })
		// A second consumer of the non-leaf, whose backward runs first
		// (Backward visits Add's second operand first), has already added
		// wx when the op's backward runs.
		shared := grad(func(x *Tensor) *Tensor {
			h := MulScalar(x, 1)
			return Add(Sum(Mul(op.f(h), wy), false), Sum(Mul(h, wx), false))
		})
		for i := range leaf {
			if math.Abs(float64(fresh[i]-leaf[i])) > 1e-6 {
				t.Fatalf("%s: fresh-buffer gradient[%d] = %v, want %v", op.name, i, fresh[i], leaf[i])
			}
			if want := leaf[i] + wx.data[i]; math.Abs(float64(shared[i]-want)) > 1e-6 {
				t.Fatalf("%s: accumulated gradient[%d] = %v, want %v", op.name, i, shared[i], want)
			}
		}
	}
}

// TestReLUParallelMask runs ReLU over a size split among three workers at
// 64-element blocks with a ragged end, forward and backward (into a leaf
// and into a fresh non-leaf buffer), against the scalar definition.
func TestReLUParallelMask(t *testing.T) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(3))
	const n = 3<<16 + 37
	rng := NewRNG(23)
	x := randT(rng, -1, 1, n).SetRequiresGrad(true)
	g := randT(rng, -1, 1, n)
	for _, viaNonLeaf := range []bool{false, true} {
		x.SetGrad(nil)
		in := x
		if viaNonLeaf {
			in = MulScalar(x, 1)
		}
		y := ReLU(in)
		for i, v := range x.data {
			if want := max(v, 0); y.data[i] != want {
				t.Fatalf("ReLU[%d] = %v, want %v", i, y.data[i], want)
			}
		}
		if err := y.BackwardWith(g); err != nil {
			t.Fatal(err)
		}
		for i, v := range x.data {
			want := float32(0)
			if v > 0 {
				want = g.data[i]
			}
			if got := x.Grad().data[i]; got != want {
				t.Fatalf("non-leaf input %v: dReLU[%d] = %v, want %v", viaNonLeaf, i, got, want)
			}
		}
	}
}
