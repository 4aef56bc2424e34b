package tensor

import (
	"fmt"
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// implicitCases are stride-1 convolutions (the implicit GEMM's domain)
// with odd sizes, padding, dilation and groups, and strided ones (on
// phase-split planes; rows of stridedMinRow pixels or more but for the
// first, which keeps to im2col): ResNet's downsampling 3×3 and 1×1
// convolutions, odd sizes, uneven strides, stride with dilation and with
// groups.
var implicitCases = []struct {
	name string
	x, w []int
	o    ConvOptions
	bias bool
}{
	{"CNN conv1", []int{5, 1, 28, 28}, []int{32, 1, 3, 3}, ConvOptions{}, true},
	{"CNN conv2", []int{3, 32, 14, 13}, []int{64, 32, 3, 3}, ConvOptions{}, true},
	{"CNN conv2 full size", []int{2, 32, 26, 26}, []int{64, 32, 3, 3}, ConvOptions{}, true},
	{"pad 1 wide", []int{2, 3, 5, 20}, []int{4, 3, 3, 3}, ConvOptions{Padding: [2]int{1, 1}}, false},
	{"groups 2 dilated wide", []int{2, 4, 7, 23}, []int{6, 2, 2, 3}, ConvOptions{Dilation: [2]int{2, 2}, Groups: 2}, true},
	{"odd no bias", []int{2, 3, 9, 11}, []int{7, 3, 2, 3}, ConvOptions{}, false},
	{"pad 1", []int{3, 5, 10, 9}, []int{13, 5, 3, 3}, ConvOptions{Padding: [2]int{1, 1}}, true},
	{"pad 2x1 dilation 2x3", []int{2, 3, 12, 13}, []int{5, 3, 3, 2}, ConvOptions{Padding: [2]int{2, 1}, Dilation: [2]int{2, 3}}, true},
	{"groups 2 pad 1", []int{2, 4, 8, 9}, []int{6, 2, 3, 3}, ConvOptions{Padding: [2]int{1, 1}, Groups: 2}, true},
	{"depthwise dilated", []int{3, 3, 9, 8}, []int{6, 1, 2, 2}, ConvOptions{Dilation: [2]int{2, 2}, Groups: 3}, false},
	{"5x5 pad 2", []int{2, 2, 10, 10}, []int{17, 2, 5, 5}, ConvOptions{Padding: [2]int{2, 2}}, true},
	{"dilation past the output", []int{2, 2, 4, 5}, []int{3, 2, 2, 2}, ConvOptions{Dilation: [2]int{3, 1}}, true},
	{"pad 1x0 dilation 3x2", []int{2, 2, 5, 6}, []int{3, 2, 3, 2}, ConvOptions{Padding: [2]int{1, 0}, Dilation: [2]int{3, 2}}, true},
	{"stride 2", []int{2, 3, 11, 9}, []int{4, 3, 3, 3}, ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, true},
	{"ResNet stride 2 3x3", []int{2, 16, 32, 32}, []int{24, 16, 3, 3}, ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, false},
	{"ResNet stride 2 1x1", []int{3, 16, 32, 32}, []int{32, 16, 1, 1}, ConvOptions{Stride: [2]int{2, 2}}, false},
	{"stride 2 wide rows", []int{2, 4, 34, 40}, []int{7, 4, 3, 3}, ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, true},
	{"stride 2 no pad odd", []int{2, 3, 9, 37}, []int{5, 3, 3, 3}, ConvOptions{Stride: [2]int{2, 2}}, true},
	{"stride 3x2 pad 2x0", []int{2, 3, 13, 35}, []int{4, 3, 4, 3}, ConvOptions{Stride: [2]int{3, 2}, Padding: [2]int{2, 0}}, true},
	{"stride 2 dilation 2 pad 2", []int{2, 3, 12, 35}, []int{5, 3, 3, 3}, ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}, false},
	{"stride 2 groups 2 5x5", []int{2, 4, 15, 33}, []int{6, 2, 5, 5}, ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{2, 2}, Groups: 2}, true},
	{"stride 4x1", []int{2, 2, 17, 17}, []int{3, 2, 2, 2}, ConvOptions{Stride: [2]int{4, 1}, Padding: [2]int{1, 1}}, true},
}

// TestConv2dImplicitMatchesIm2col runs each case through the implicit
// GEMM and through im2col, on one thread and on two (images spread over
// goroutines, partial weight gradients merged), with every epilogue, an
// input that is a leaf (its gradient accumulates) or an op's result (its
// gradient buffer is fresh): outputs and gradients must agree to
// rounding (the k blocks differ), and the output must match the float64
// reference loop.
func TestConv2dImplicitMatchesIm2col(t *testing.T) {
	if !kernels.ImplicitConv() {
		t.Skip("no implicit-GEMM kernels on this CPU")
	}
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	defer func(v bool) { implicitConv = v }(implicitConv)
	// Every forward product implicit, however short its k.
	defer func(k int) { implicitForwardMinK = k }(implicitForwardMinK)
	implicitForwardMinK = 0
	rng := NewRNG(71)
	for _, c := range implicitCases {
		o := c.o
		o.Stride, o.Dilation, o.Groups = orOne(o.Stride), orOne(o.Dilation), max(o.Groups, 1)
		x0, w0 := randT(rng, -1, 1, c.x...), randT(rng, -1, 1, c.w...)
		var b0 *Tensor
		if c.bias {
			b0 = randT(rng, -1, 1, c.w[0])
		}
		oh := kernels.ConvOut(c.x[2], c.w[2], o.Stride[0], o.Padding[0], o.Dilation[0])
		ow := kernels.ConvOut(c.x[3], c.w[3], o.Stride[1], o.Padding[1], o.Dilation[1])
		for _, ep := range [][]PostOp{nil, {PostReLU}, {PostReLU, PostMaxPool2x2}} {
			if len(ep) == 2 && (oh < 2 || ow < 2) {
				continue
			}
			for _, threads := range []int{1, 2} {
				for _, leaf := range []bool{true, false} {
					run := func(implicit bool) (y []float32, g [3][]float32) {
						implicitConv = implicit
						kernels.SetNumThreads(threads)
						x, w := x0.Detach().SetRequiresGrad(true), w0.Detach().SetRequiresGrad(true)
						var b *Tensor
						if b0 != nil {
							b = b0.Detach().SetRequiresGrad(true)
						}
						in := x
						if !leaf {
							in = MulScalar(x, 1.5)
						}
						if leaf {
							// A gradient already there must be added to.
							if err := Sum(Mul(x, x), false).Backward(); err != nil {
								t.Fatal(err)
							}
						}
						out := Conv2dWith(in, w, b, o, ep...)
						if err := Sum(Mul(out, out), false).Backward(); err != nil {
							t.Fatal(err)
						}
						g = [3][]float32{x.Grad().Data(), w.Grad().Data()}
						if b != nil {
							g[2] = b.Grad().Data()
						}
						return out.Data(), g
					}
					y1, g1 := run(true)
					y2, g2 := run(false)
					for i := range y1 {
						if d := math.Abs(float64(y1[i] - y2[i])); d > 1e-5*(1+math.Abs(float64(y2[i]))) {
							t.Fatalf("%s %v threads %d: output[%d] %v implicit, %v im2col", c.name, ep, threads, i, y1[i], y2[i])
						}
					}
					for k := range g1 {
						// Sums of hundreds of terms in another order: the
						// error scales with the gradient's magnitude, not
						// with each element (which may cancel to near 0).
						scale := 0.0
						for _, v := range g2[k] {
							scale = max(scale, math.Abs(float64(v)))
						}
						for i := range g1[k] {
							if d := math.Abs(float64(g1[k][i] - g2[k][i])); d > 1e-5*(1+scale) {
								t.Fatalf("%s %v threads %d leaf %v: gradient %d[%d] %v implicit, %v im2col", c.name, ep, threads, leaf, k, i, g1[k][i], g2[k][i])
							}
						}
					}
					if len(ep) == 0 && threads == 1 && leaf {
						ref, _ := convOptRef(x0, w0, b0, o)
						for i, r := range ref {
							if d := math.Abs(float64(y1[i]) - r); d > 1e-5*(1+math.Abs(r)) {
								t.Fatalf("%s: output[%d] %v, reference %v", c.name, i, y1[i], r)
							}
						}
					}
				}
			}
		}
	}
}

// TestConv2dImplicitSkipsInputGrad checks that a convolution of an input
// that needs no gradient (the first layer) computes only the weight and
// bias gradients, and these match the im2col path's.
func TestConv2dImplicitSkipsInputGrad(t *testing.T) {
	if !kernels.ImplicitConv() {
		t.Skip("no implicit-GEMM kernels on this CPU")
	}
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	defer func(v bool) { implicitConv = v }(implicitConv)
	rng := NewRNG(72)
	x := randT(rng, 0, 1, 4, 1, 28, 28)
	w0, b0 := randT(rng, -1, 1, 32, 1, 3, 3), randT(rng, -1, 1, 32)
	var grads [2][2][]float32
	for k, implicit := range []bool{true, false} {
		implicitConv = implicit
		w, b := w0.Detach().SetRequiresGrad(true), b0.Detach().SetRequiresGrad(true)
		out := Conv2d(x, w, b, [2]int{1, 1}, [2]int{0, 0}, PostReLU)
		if err := Sum(out, false).Backward(); err != nil {
			t.Fatal(err)
		}
		if x.Grad() != nil {
			t.Fatal("input that needs no gradient got one")
		}
		grads[k] = [2][]float32{w.Grad().Data(), b.Grad().Data()}
	}
	for k := range grads[0] {
		for i, v := range grads[0][k] {
			if want := grads[1][k][i]; math.Abs(float64(v-want)) > 1e-4*(1+math.Abs(float64(want))) {
				t.Fatalf("gradient %d[%d] %v implicit, %v im2col", k, i, v, want)
			}
		}
	}
}

// BenchmarkConvLayers times the CNN's two convolutions (batch 64; conv2
// with ReLU and pooling fused) forward and backward on one thread, by the
// implicit GEMM and by im2col, alternately so that load on a shared
// machine hits both alike: `go test -run XXX -bench ConvLayers ./tensor`.
func BenchmarkConvLayers(b *testing.B) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	defer func(v bool) { implicitConv = v }(implicitConv)
	rng := NewRNG(73)
	x1 := randT(rng, 0, 1, 64, 1, 28, 28)
	x2 := randT(rng, 0, 1, 64, 32, 26, 26).SetRequiresGrad(true)
	w1, b1 := randT(rng, -0.3, 0.3, 32, 1, 3, 3).SetRequiresGrad(true), randT(rng, -0.3, 0.3, 32).SetRequiresGrad(true)
	w2, b2 := randT(rng, -0.06, 0.06, 64, 32, 3, 3).SetRequiresGrad(true), randT(rng, -0.06, 0.06, 64).SetRequiresGrad(true)
	one, zero := [2]int{1, 1}, [2]int{0, 0}
	layers := []struct {
		name string
		f    func() *Tensor
	}{
		{"conv1", func() *Tensor { return Conv2d(x1, w1, b1, one, zero, PostReLU) }},
		{"conv2", func() *Tensor { return Conv2d(x2, w2, b2, one, zero, PostReLU, PostMaxPool2x2) }},
	}
	for round := range benchRounds {
		for _, l := range layers {
			for _, implicit := range []bool{true, false} {
				name := "im2col"
				if implicit {
					name = "implicit"
				}
				for _, pass := range []string{"forward", "step"} {
					b.Run(fmt.Sprintf("%s/%s/%s/%d", l.name, pass, name, round), func(b *testing.B) {
						implicitConv = implicit
						cpu0 := processCPUTime()
						for b.Loop() {
							out := l.f()
							if pass == "step" {
								if err := Sum(out, false).Backward(); err != nil {
									b.Fatal(err)
								}
							}
						}
						// CPU time is steadier than wall time when other
						// processes share the cores.
						b.ReportMetric(float64(processCPUTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
					})
				}
			}
		}
	}
}

// benchRounds is how many times BenchmarkConvLayers alternates the two
// paths; compare the fastest run of each.
const benchRounds = 5
