package tensor

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestConv2dFusedMatchesUnfused checks that Conv2d with the post-ops
// [ReLU] and [ReLU MaxPool2x2] gives bit for bit the values and the input, weight
// and bias gradients of the ops they fuse, over geometries with and
// without bias, padding, stride, odd output sizes (a pooled row and column
// left over), inputs that are non-leaves, and one and several goroutines.
func TestConv2dFusedMatchesUnfused(t *testing.T) {
	type geo struct {
		n, c, h, w, o, k int
		stride, pad      [2]int
		bias             bool
	}
	geos := []geo{
		{2, 1, 8, 8, 4, 3, [2]int{1, 1}, [2]int{0, 0}, true},
		{3, 3, 9, 7, 5, 3, [2]int{1, 1}, [2]int{1, 0}, true},    // odd output 9x5
		{2, 2, 11, 10, 3, 2, [2]int{2, 1}, [2]int{0, 1}, false}, // stride, no bias
		{5, 4, 6, 6, 6, 1, [2]int{1, 1}, [2]int{0, 0}, true},    // 1x1: no im2col
		{9, 8, 12, 12, 16, 3, [2]int{1, 1}, [2]int{0, 0}, true}, // several workers
		{3, 64, 7, 6, 64, 3, [2]int{1, 1}, [2]int{1, 1}, true},  // Winograd, odd height
		{4, 64, 4, 4, 72, 3, [2]int{1, 1}, [2]int{1, 1}, false}, // Winograd, small planes
	}
	pool := func(x *Tensor) *Tensor { return MaxPool2d(x, [2]int{2, 2}, [2]int{2, 2}, [2]int{}) }
	for gi, gm := range geos {
		for _, threads := range []int{1, 3} {
			for _, pooled := range []bool{false, true} {
				name := fmt.Sprintf("geo%d/threads%d/pool%v", gi, threads, pooled)
				t.Run(name, func(t *testing.T) {
					defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
					rng := NewRNG(uint64(40 + gi))
					x := randT(rng, -1, 1, gm.n, gm.c, gm.h, gm.w)
					// Exact zeros and a NaN-free tie-rich input: some
					// convolution outputs are exactly 0 or negative.
					x.data[0], x.data[1] = 0, 0
					w := randT(rng, -1, 1, gm.o, gm.c, gm.k, gm.k)
					var b *Tensor
					if gm.bias {
						b = randT(rng, -1, 1, gm.o)
					}
					run := func(fused bool) (out, gx, gw, gb []float32) {
						params := []*Tensor{x, w, b}
						for _, p := range params {
							if p != nil {
								p.SetGrad(nil)
								p.SetRequiresGrad(true)
							}
						}
						// The input is a non-leaf, as inside a network.
						h := MulScalar(x, 1)
						var y *Tensor
						switch {
						case fused && pooled:
							y = Conv2d(h, w, b, gm.stride, gm.pad, PostReLU, PostMaxPool2x2)
						case fused:
							y = Conv2d(h, w, b, gm.stride, gm.pad, PostReLU)
						case pooled:
							y = pool(ReLU(Conv2d(h, w, b, gm.stride, gm.pad)))
						default:
							y = ReLU(Conv2d(h, w, b, gm.stride, gm.pad))
						}
						out = slices.Clone(y.data)
						wy := randT(NewRNG(7), -1, 1, y.shape...)
						if err := Sum(Mul(y, wy), false).Backward(); err != nil {
							t.Fatal(err)
						}
						gx, gw = x.Grad().Clone().data, w.Grad().Clone().data
						if b != nil {
							gb = b.Grad().Clone().data
						}
						return
					}
					wantOut, wantGx, wantGw, wantGb := run(false)
					out, gx, gw, gb := run(true)
					for _, c := range []struct {
						what      string
						got, want []float32
					}{{"output", out, wantOut}, {"dx", gx, wantGx}, {"dw", gw, wantGw}, {"db", gb, wantGb}} {
						if len(c.got) != len(c.want) {
							t.Fatalf("%s: %d values, want %d", c.what, len(c.got), len(c.want))
						}
						for i := range c.got {
							if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
								t.Fatalf("%s[%d] = %v, unfused %v", c.what, i, c.got[i], c.want[i])
							}
						}
					}
				})
			}
		}
	}
}

// TestConv2dFusedNoGrad checks the fused ops without autograd (no mask is
// kept) against the unfused ones, and that they record no history.
func TestConv2dFusedNoGrad(t *testing.T) {
	rng := NewRNG(9)
	x := randT(rng, -1, 1, 3, 2, 8, 9)
	w := randT(rng, -1, 1, 4, 2, 3, 3)
	b := randT(rng, -1, 1, 4)
	one, zero := [2]int{1, 1}, [2]int{}
	want := MaxPool2d(ReLU(Conv2d(x, w, b, one, zero)), [2]int{2, 2}, [2]int{2, 2}, zero)
	got := Conv2d(x, w, b, one, zero, PostReLU, PostMaxPool2x2)
	if !slices.Equal(got.shape, want.shape) || !slices.Equal(got.data, want.data) {
		t.Fatalf("Conv2d+ReLU+MaxPool2x2 = %v, want %v", got, want)
	}
	w.SetRequiresGrad(true)
	NoGrad(func() {
		got := Conv2d(x, w, b, one, zero, PostReLU)
		if !slices.Equal(got.data, ReLU(Conv2d(x, w, b, one, zero)).data) {
			t.Fatal("Conv2d+ReLU differs from ReLU(Conv2d) under NoGrad")
		}
		if got.RequiresGrad() || !got.IsLeaf() {
			t.Fatal("Conv2d+ReLU recorded history under NoGrad")
		}
	})
}

func TestConv2dPostPoolTooSmall(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || fmt.Sprint(r)[:7] != "tensor:" {
			t.Fatalf("panic %v, want a tensor: message", r)
		}
	}()
	Conv2d(Zeros(1, 1, 3, 5), Zeros(2, 1, 3, 3), nil, [2]int{1, 1}, [2]int{}, PostReLU, PostMaxPool2x2)
}

// TestConv2dUnsupportedPostOps: post-op lists Conv2d has no fused kernel
// for panic with a tensor: message.
func TestConv2dUnsupportedPostOps(t *testing.T) {
	for _, post := range [][]PostOp{{PostMaxPool2x2}, {PostReLU, PostReLU}, {PostMaxPool2x2, PostReLU}, {0}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), "tensor: Conv2d: post-ops") {
					t.Fatalf("post-ops %v: panic %v, want a tensor: Conv2d: post-ops message", post, r)
				}
			}()
			Conv2d(Zeros(1, 1, 4, 4), Zeros(2, 1, 3, 3), nil, [2]int{1, 1}, [2]int{}, post...)
		}()
	}
}
