package tensor

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// winogradCases are 3×3 "same" convolutions at stride 1: odd and even
// sizes (blocks cut by the edges), one image, rows under 16 pixels
// (stacked side by side), channel counts not a multiple of 16, and
// ResNet's widths.
var winogradCases = []struct {
	name string
	x, w []int
	bias bool
}{
	{"tiny odd", []int{1, 3, 5, 7}, []int{5, 3, 3, 3}, true},
	{"one pixel", []int{2, 2, 1, 1}, []int{3, 2, 3, 3}, false},
	{"one row", []int{3, 4, 1, 9}, []int{2, 4, 3, 3}, true},
	{"even", []int{3, 17, 8, 10}, []int{19, 17, 3, 3}, false},
	{"odd wide", []int{2, 9, 13, 33}, []int{11, 9, 3, 3}, true},
	{"batch 1 ResNet 16x16", []int{1, 128, 16, 16}, []int{128, 128, 3, 3}, false},
	{"ResNet 8x8 stacked", []int{4, 128, 8, 8}, []int{136, 128, 3, 3}, true},
	{"ResNet 4x4 stacked", []int{6, 144, 4, 4}, []int{128, 144, 3, 3}, false},
}

// TestConv2dWinogradMatchesDirect runs each case through Winograd
// F(2×2, 3×3) and through the direct products, on one thread and on two,
// with every epilogue, an input that is a leaf (its gradient accumulates)
// or an op's result (fresh), in chunks of whole images and in strips of
// block rows: the output and every gradient must agree to float32
// rounding of the sums, and the output must match the float64 reference
// loop.
func TestConv2dWinogradMatchesDirect(t *testing.T) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	defer func(v bool) { winogradConv = v }(winogradConv)
	defer func(v int) { winogradMinChannels = v }(winogradMinChannels)
	winogradMinChannels = 1
	t.Run("images", func(t *testing.T) { testWinogradMatchesDirect(t) })
	// Chunks of a few block rows of one image, as for large planes.
	defer func(b, m int) { wgTargetBytes, wgMinBlocks = b, m }(wgTargetBytes, wgMinBlocks)
	wgTargetBytes, wgMinBlocks = 0, 20
	if wg := newWgGeom(9, 11, 13, 33); wg.rows >= wg.th {
		t.Fatalf("%d×%d blocks in chunks of %d rows: not in strips", wg.th, wg.tw, wg.rows)
	}
	t.Run("strips", func(t *testing.T) { testWinogradMatchesDirect(t) })
}

func testWinogradMatchesDirect(t *testing.T) {
	rng := NewRNG(91)
	opt := ConvOptions{Stride: [2]int{1, 1}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1}
	for _, c := range winogradCases {
		x0, w0 := randT(rng, -1, 1, c.x...), randT(rng, -1, 1, c.w...)
		var b0 *Tensor
		if c.bias {
			b0 = randT(rng, -1, 1, c.w[0])
		}
		g := convGeom{c: c.x[1], o: c.w[0], kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, groups: 1}
		winogradConv = true
		if !g.winograd() {
			t.Fatalf("%s: not on the Winograd path", c.name)
		}
		for _, ep := range [][]PostOp{nil, {PostReLU}, {PostReLU, PostMaxPool2x2}} {
			if len(ep) == 2 && (c.x[2] < 2 || c.x[3] < 2) {
				continue
			}
			for _, threads := range []int{1, 2} {
				for _, leaf := range []bool{true, false} {
					run := func(wino bool) (y []float32, gr [3][]float32) {
						winogradConv = wino
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
							// A gradient already there must be added to.
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
					y1, g1 := run(true)
					y2, g2 := run(false)
					// Sums of C·9 terms of magnitude up to 1: rounding
					// scales with that, not with each (maybe cancelling)
					// result.
					tol := 1e-6 * float64(c.x[1]*9)
					for i := range y1 {
						if d := math.Abs(float64(y1[i] - y2[i])); d > tol {
							t.Fatalf("%s %v threads %d: output[%d] %v Winograd, %v direct", c.name, ep, threads, i, y1[i], y2[i])
						}
					}
					for k := range g1 {
						scale := 0.0
						for _, v := range g2[k] {
							scale = max(scale, math.Abs(float64(v)))
						}
						for i := range g1[k] {
							if d := math.Abs(float64(g1[k][i] - g2[k][i])); d > 1e-5*(1+scale) {
								t.Fatalf("%s %v threads %d leaf %v: gradient %d[%d] %v Winograd, %v direct", c.name, ep, threads, leaf, k, i, g1[k][i], g2[k][i])
							}
						}
					}
					if len(ep) == 0 && threads == 1 && leaf {
						ref, _ := convOptRef(x0, w0, b0, opt)
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
}

// TestConv2dWinogradExactOnIntegers checks the Winograd path bit for bit
// against the direct one where every sum is exact: small integers in the
// input, the weights and the output gradient (the transforms' halves then
// leave only multiples of ¼, far from float32's limits). Any wrong
// coefficient in a transform shows as a wrong integer.
func TestConv2dWinogradExactOnIntegers(t *testing.T) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	defer func(v bool) { winogradConv = v }(winogradConv)
	defer func(v int) { winogradMinChannels = v }(winogradMinChannels)
	winogradMinChannels = 1
	rng := NewRNG(92)
	ints := func(shape ...int) *Tensor {
		x := randT(rng, -4, 4, shape...)
		for i, v := range x.data {
			x.data[i] = float32(math.Round(float64(v)))
		}
		return x
	}
	opt := ConvOptions{Stride: [2]int{1, 1}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1}
	for _, sh := range [][2][]int{
		{{1, 1, 2, 2}, {1, 1, 3, 3}},
		{{2, 3, 5, 7}, {4, 3, 3, 3}},
		{{3, 5, 9, 34}, {6, 5, 3, 3}},
	} {
		x0, w0 := ints(sh[0]...), ints(sh[1]...)
		r := ints(sh[0][0], sh[1][0], sh[0][2], sh[0][3])
		var res [2][3][]float32
		for k, wino := range []bool{true, false} {
			winogradConv = wino
			x, w := x0.Detach().SetRequiresGrad(true), w0.Detach().SetRequiresGrad(true)
			y := Conv2dWith(x, w, nil, opt)
			if err := Sum(Mul(y, r), false).Backward(); err != nil {
				t.Fatal(err)
			}
			res[k] = [3][]float32{y.Data(), x.Grad().Data(), w.Grad().Data()}
		}
		for q, name := range []string{"output", "input gradient", "weight gradient"} {
			for i, v := range res[0][q] {
				if want := res[1][q][i]; v != want {
					t.Fatalf("%v: %s[%d] = %v Winograd, %v direct", sh, name, i, v, want)
				}
			}
		}
	}
}
