package tensor

import (
	"math"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// colStackCases are im2col-path convolutions with small output planes:
// ResNet's stride-2 3×3 and 1×1 downsampling, a batch that leaves a
// partial last stack, channel counts not a multiple of 16, dilation,
// unequal strides and a rectangular kernel, odd sizes, and a batch of one
// (a stack of one image: the per-image path).
var colStackCases = []struct {
	name  string
	x, w  []int
	opt   ConvOptions
	bias  bool
	stack int // the images per product colStack must choose
}{
	{"3x3 stride 2, partial stack", []int{7, 20, 9, 9}, []int{17, 20, 3, 3},
		ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, true, 5},
	{"1x1 stride 2 downsample", []int{11, 24, 8, 8}, []int{40, 24, 1, 1},
		ConvOptions{Stride: [2]int{2, 2}}, false, 8},
	{"ResNet 8x8 to 4x4", []int{9, 64, 8, 8}, []int{72, 64, 3, 3},
		ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, false, 8},
	{"dilated", []int{9, 5, 11, 11}, []int{7, 5, 3, 3},
		ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}, true, 3},
	{"unequal strides, 3x2 kernel", []int{4, 6, 10, 7}, []int{5, 6, 3, 2},
		ConvOptions{Stride: [2]int{2, 1}, Padding: [2]int{1, 0}}, true, 4},
	{"batch 1", []int{1, 3, 7, 5}, []int{6, 3, 3, 3},
		ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, true, 1},
}

// colStackRun is one forward and backward pass of Conv2dWith with the
// stacked path on or off, on the given threads; the input is a leaf
// holding a gradient already (to be added to) or an op's result (fresh).
func colStackRun(t *testing.T, x0, w0, b0 *Tensor, opt ConvOptions, ep []PostOp, stacked bool, threads int, leaf bool) (y []float32, gr [3][]float32) {
	t.Helper()
	colStackConv = stacked
	kernels.SetNumThreads(threads)
	x, w := x0.Detach().SetRequiresGrad(true), w0.Detach().SetRequiresGrad(true)
	var b *Tensor
	if b0 != nil {
		b = b0.Detach().SetRequiresGrad(true)
	}
	in := x
	if !leaf {
		in = MulScalar(x, 1.5)
	} else if err := Sum(Mul(x, x), false).Backward(); err != nil {
		t.Fatal(err)
	}
	out := Conv2dWith(in, w, b, opt, ep...)
	if err := Sum(Mul(out, out), false).Backward(); err != nil {
		t.Fatal(err)
	}
	gr = [3][]float32{x.Grad().Data(), w.Grad().Data()}
	if b != nil {
		gr[2] = b.Grad().Data()
	}
	return out.Data(), gr
}

// TestConv2dColStackMatchesPerImage runs each case with its images'
// column matrices side by side and one image at a time, with every
// epilogue, on 1 and 3 threads: the output and every gradient must agree
// to float32 rounding, the output must match the float64 reference loop,
// and the output and the input gradient must be the same bits on 1 and 3
// threads (the stacks do not depend on the workers).
func TestConv2dColStackMatchesPerImage(t *testing.T) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	defer func(v bool) { colStackConv = v }(colStackConv)
	rng := NewRNG(17)
	for _, c := range colStackCases {
		opt := c.opt
		opt.Stride, opt.Dilation, opt.Groups = orOne(opt.Stride), orOne(opt.Dilation), 1
		x0, w0 := randT(rng, -1, 1, c.x...), randT(rng, -1, 1, c.w...)
		var b0 *Tensor
		if c.bias {
			b0 = randT(rng, -1, 1, c.w[0])
		}
		colStackConv = true
		g := newConvGeom("Conv2d", x0, w0, b0, opt, epNone)
		if k := g.colStack(); k != c.stack {
			t.Fatalf("%s: %d images per product, want %d", c.name, k, c.stack)
		}
		if g.implicit(1) || g.winograd() || g.stackImages() > 1 {
			t.Fatalf("%s: not on the im2col path", c.name)
		}
		ref, _ := convOptRef(x0, w0, b0, opt)
		// Sums of ckk terms of magnitude up to 1.
		tol := 1e-6 * float64(g.ckk())
		for _, ep := range [][]PostOp{nil, {PostReLU}, {PostReLU, PostMaxPool2x2}} {
			if len(ep) == 2 && (g.oh < 2 || g.ow < 2) {
				continue
			}
			for _, leaf := range []bool{true, false} {
				y1, g1 := colStackRun(t, x0, w0, b0, opt, ep, true, 1, leaf)
				y3, g3 := colStackRun(t, x0, w0, b0, opt, ep, true, 3, leaf)
				if !slices.Equal(y1, y3) {
					t.Fatalf("%s %v: output differs between 1 and 3 threads", c.name, ep)
				}
				if !slices.Equal(g1[0], g3[0]) {
					t.Fatalf("%s %v leaf %v: input gradient differs between 1 and 3 threads", c.name, ep, leaf)
				}
				for _, threads := range []int{1, 3} {
					ys, gs := y1, g1
					if threads == 3 {
						ys, gs = y3, g3
					}
					yp, gp := colStackRun(t, x0, w0, b0, opt, ep, false, threads, leaf)
					for i := range ys {
						if d := math.Abs(float64(ys[i] - yp[i])); d > tol {
							t.Fatalf("%s %v threads %d: output[%d] %v stacked, %v per image", c.name, ep, threads, i, ys[i], yp[i])
						}
					}
					for k := range gs {
						if len(gs[k]) != len(gp[k]) {
							t.Fatalf("%s: gradient %d has %d elements stacked, %d per image", c.name, k, len(gs[k]), len(gp[k]))
						}
						scale := 0.0
						for _, v := range gp[k] {
							scale = max(scale, math.Abs(float64(v)))
						}
						for i := range gs[k] {
							if d := math.Abs(float64(gs[k][i] - gp[k][i])); d > 1e-5*(1+scale) {
								t.Fatalf("%s %v threads %d leaf %v: gradient %d[%d] %v stacked, %v per image", c.name, ep, threads, leaf, k, i, gs[k][i], gp[k][i])
							}
						}
					}
				}
				if len(ep) == 0 && leaf { // the input itself, not 1.5 times it
					for i, r := range ref {
						if d := math.Abs(float64(y1[i]) - r); d > tol {
							t.Fatalf("%s: output[%d] %v, reference %v", c.name, i, y1[i], r)
						}
					}
				}
			}
		}
	}
}
