package tensor

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestSoftmaxThreadsAgree checks that Softmax and LogSoftmax spread over
// three threads give bit for bit the one-thread output and input
// gradient, along the last dim and a middle one, and that the output is
// the softmax of every lane (none skipped or written twice by the split).
func TestSoftmaxThreadsAgree(t *testing.T) {
	shape := []int{8, 64, 48}
	for _, dim := range []int{-1, 1} {
		_, outer, size, inner := splitDim("test", shape, dim)
		prev := kernels.SetNumThreads(3)
		workers := parallelWorkers(outer*inner, softmaxMinItems/size)
		kernels.SetNumThreads(prev)
		if workers < 3 {
			t.Fatalf("dim %d: shape %v does not split over 3 threads (%d workers)", dim, shape, workers)
		}
		for _, log := range []bool{false, true} {
			name := fmt.Sprintf("softmax dim=%d log=%v", dim, log)
			run := func(threads int) (x, y, gx []float32) {
				defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
				rng := NewRNG(5)
				xt := randT(rng, -30, 30, shape...).SetRequiresGrad(true)
				var yt *Tensor
				if log {
					yt = LogSoftmax(xt, dim)
				} else {
					yt = Softmax(xt, dim)
				}
				if err := Sum(Mul(yt, randT(rng, -1, 1, shape...)), false).Backward(); err != nil {
					t.Fatal(err)
				}
				return xt.Data(), yt.Data(), xt.Grad().Data()
			}
			x, y1, g1 := run(1)
			_, y3, g3 := run(3)
			if !slices.Equal(y1, y3) {
				t.Errorf("%s: output differs between 1 and 3 threads", name)
			}
			if !slices.Equal(g1, g3) {
				t.Errorf("%s: input grad differs between 1 and 3 threads", name)
			}
			for o := range outer {
				for i := range inner {
					base := o*size*inner + i
					m := math.Inf(-1)
					for k := range size {
						m = max(m, float64(x[base+k*inner]))
					}
					var sum float64
					for k := range size {
						sum += math.Exp(float64(x[base+k*inner]) - m)
					}
					for k := range size {
						j := base + k*inner
						want := math.Exp(float64(x[j])-m) / sum
						if log {
							want = float64(x[j]) - m - math.Log(sum)
						}
						if d := math.Abs(float64(y3[j]) - want); d > 1e-5*max(1, math.Abs(want)) {
							t.Fatalf("%s: element %d = %v, want %v", name, j, y3[j], want)
						}
					}
				}
			}
		}
	}
}

// TestUnaryThreadsAgree checks that the element-wise ops built on unary
// give bit for bit the one-thread output and input gradient at three
// threads, on a tensor that splits over all three.
func TestUnaryThreadsAgree(t *testing.T) {
	const n = 3*elemMinItems/8 + 77
	prev := kernels.SetNumThreads(3)
	workers := parallelWorkers(n, elemMinItems/8)
	kernels.SetNumThreads(prev)
	if workers < 3 {
		t.Fatalf("%d elements do not split over 3 threads (%d workers)", n, workers)
	}
	ops := []struct {
		name   string
		lo, hi float32
		f      func(*Tensor) *Tensor
	}{
		{"exp", -5, 5, Exp}, {"log", 0.01, 9, Log}, {"sqrt", 0.01, 9, Sqrt}, {"tanh", -4, 4, Tanh},
		{"sigmoid", -9, 9, Sigmoid}, {"pow", 0.1, 3, func(x *Tensor) *Tensor { return PowScalar(x, 1.7) }},
		{"clamp", -2, 2, func(x *Tensor) *Tensor { return Clamp(x, -1, 1) }},
	}
	for _, op := range ops {
		run := func(threads int) (x, y, gx []float32) {
			defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
			rng := NewRNG(9)
			xt := randT(rng, op.lo, op.hi, n).SetRequiresGrad(true)
			yt := op.f(xt)
			if err := Sum(Mul(yt, randT(rng, -1, 1, n)), false).Backward(); err != nil {
				t.Fatal(err)
			}
			return xt.Data(), yt.Data(), xt.Grad().Data()
		}
		x, y1, g1 := run(1)
		_, y3, g3 := run(3)
		if !slices.Equal(y1, y3) {
			t.Errorf("%s: output differs between 1 and 3 threads", op.name)
		}
		if !slices.Equal(g1, g3) {
			t.Errorf("%s: input grad differs between 1 and 3 threads", op.name)
		}
		// Every element written: the last one, in the last worker's piece,
		// is f of its input.
		if want := op.f(New(x[n-1:], 1)).Data()[0]; y3[n-1] != want {
			t.Errorf("%s: last element %v, want %v", op.name, y3[n-1], want)
		}
	}
}
