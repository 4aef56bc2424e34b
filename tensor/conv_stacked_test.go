package tensor

import (
	"math"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestConv2dStackedMatchesPerImage runs "same" convolutions over small
// planes with images laid side by side and one by one, on one thread and
// on two: outputs and the gradients of input, weight and bias must agree
// to rounding, and the side-by-side path must be the one taken.
func TestConv2dStackedMatchesPerImage(t *testing.T) {
	if !kernels.ImplicitConv() {
		t.Skip("no implicit-GEMM kernels on this CPU")
	}
	defer func(v bool) { stackedConv = v }(stackedConv)
	rng := NewRNG(5)
	for _, c := range []struct {
		name string
		x, w []int
		pad  int
		bias bool
		k1   int // images per row on one thread
	}{
		{"ResNet layer4 shape", []int{8, 16, 4, 4}, []int{12, 16, 3, 3}, 1, false, 8},
		{"8x8 with bias", []int{6, 8, 8, 8}, []int{5, 8, 3, 3}, 1, true, 6},
		{"non-square 5x7", []int{9, 3, 5, 7}, []int{4, 3, 3, 3}, 1, true, 9},
		{"5x5 kernel", []int{4, 3, 6, 6}, []int{7, 3, 5, 5}, 2, true, 4},
		{"prime batch (one by one on two threads)", []int{7, 4, 4, 4}, []int{6, 4, 3, 3}, 1, false, 7},
	} {
		for _, threads := range []int{1, 2} {
			prev := kernels.SetNumThreads(threads)
			stackedConv = true
			x0, w0 := randT(rng, -1, 1, c.x...), randT(rng, -1, 1, c.w...)
			var b0 *Tensor
			if c.bias {
				b0 = randT(rng, -1, 1, c.w[0])
			}
			opt := ConvOptions{Padding: [2]int{c.pad, c.pad}}
			g := newConvGeom("Conv2d", x0, w0, b0, ConvOptions{Stride: [2]int{1, 1}, Padding: opt.Padding, Dilation: [2]int{1, 1}, Groups: 1}, epNone)
			k := g.stackImages()
			want := c.k1
			if threads == 2 {
				want = 1
				for d := 2; d <= c.x[0]/2; d++ {
					if c.x[0]%d == 0 {
						want = d
					}
				}
			}
			if k != want {
				t.Errorf("%s, %d threads: %d images per row, want %d", c.name, threads, k, want)
			}
			run := func(stacked bool) (y, gx, gw, gb []float32) {
				stackedConv = stacked
				x, w := x0.Detach().SetRequiresGrad(true), w0.Detach().SetRequiresGrad(true)
				var b *Tensor
				if b0 != nil {
					b = b0.Detach().SetRequiresGrad(true)
				}
				out := Conv2dWith(x, w, b, opt)
				// A weighted sum, so that every output position's gradient differs.
				wts := randT(NewRNG(9), -1, 1, out.Shape()...)
				if err := Sum(Mul(out, wts), false).Backward(); err != nil {
					t.Fatal(err)
				}
				if b != nil {
					gb = b.Grad().Data()
				}
				return out.Data(), x.Grad().Data(), w.Grad().Data(), gb
			}
			y1, gx1, gw1, gb1 := run(true)
			y0, gx0, gw0, gb0 := run(false)
			for _, p := range []struct {
				what      string
				got, want []float32
			}{{"output", y1, y0}, {"input grad", gx1, gx0}, {"weight grad", gw1, gw0}, {"bias grad", gb1, gb0}} {
				if len(p.got) != len(p.want) {
					t.Fatalf("%s, %d threads: %s has %d values, want %d", c.name, threads, p.what, len(p.got), len(p.want))
				}
				scale := 0.0
				for _, v := range p.want {
					scale = max(scale, math.Abs(float64(v)))
				}
				for i := range p.got {
					if d := math.Abs(float64(p.got[i] - p.want[i])); d > 1e-5*scale {
						t.Fatalf("%s, %d threads: %s[%d] = %v side by side, %v one by one", c.name, threads, p.what, i, p.got[i], p.want[i])
					}
				}
			}
			kernels.SetNumThreads(prev)
		}
	}
}

// TestConv2dStackedFusedMatchesUnfused checks, for convolutions that lay
// images side by side, that Conv2d with the post-ops [ReLU] and [ReLU
// MaxPool2x2] still gives bit for bit the values and gradients of the
// separate ops, odd sizes (a pooled row and column left over) included.
func TestConv2dStackedFusedMatchesUnfused(t *testing.T) {
	if !kernels.ImplicitConv() {
		t.Skip("no implicit-GEMM kernels on this CPU")
	}
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	pad := [2]int{1, 1}
	for _, shape := range [][]int{{6, 5, 8, 8}, {4, 3, 5, 7}} {
		rng := NewRNG(11)
		x0 := randT(rng, -1, 1, shape...)
		w0 := randT(rng, -1, 1, 7, shape[1], 3, 3)
		b0 := randT(rng, -1, 1, 7)
		g := newConvGeom("Conv2d", x0, w0, b0, ConvOptions{Stride: [2]int{1, 1}, Padding: pad, Dilation: [2]int{1, 1}, Groups: 1}, epNone)
		if k := g.stackImages(); k < 2 {
			t.Fatalf("%v: not laid side by side (%d per row)", shape, k)
		}
		for _, pooled := range []bool{false, true} {
			run := func(fused bool) [][]float32 {
				x, w, b := x0.Detach().SetRequiresGrad(true), w0.Detach().SetRequiresGrad(true), b0.Detach().SetRequiresGrad(true)
				h := MulScalar(x, 1) // a non-leaf input, as inside a network
				var y *Tensor
				switch {
				case fused && pooled:
					y = Conv2d(h, w, b, [2]int{1, 1}, pad, PostReLU, PostMaxPool2x2)
				case fused:
					y = Conv2d(h, w, b, [2]int{1, 1}, pad, PostReLU)
				default:
					y = ReLU(Conv2d(h, w, b, [2]int{1, 1}, pad))
					if pooled {
						y = MaxPool2d(y, [2]int{2, 2}, [2]int{2, 2}, [2]int{})
					}
				}
				out := append([]float32(nil), y.Data()...)
				if err := Sum(Mul(y, randT(NewRNG(2), -1, 1, y.Shape()...)), false).Backward(); err != nil {
					t.Fatal(err)
				}
				return [][]float32{out, x.Grad().Data(), w.Grad().Data(), b.Grad().Data()}
			}
			f, u := run(true), run(false)
			for i, what := range []string{"output", "input grad", "weight grad", "bias grad"} {
				if !slices.Equal(f[i], u[i]) {
					t.Errorf("%v pooled=%v: fused %s differs from the separate ops'", shape, pooled, what)
				}
			}
		}
	}
}
