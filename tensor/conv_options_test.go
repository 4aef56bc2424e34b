package tensor

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// convOptRef is Conv2dWith's reference loop in float64.
func convOptRef(x, w, b *Tensor, o ConvOptions) (out []float64, shape []int) {
	n, c, h, wd := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	oc, cg, kh, kw := w.shape[0], w.shape[1], w.shape[2], w.shape[3]
	og := oc / o.Groups
	oh := kernels.ConvOut(h, kh, o.Stride[0], o.Padding[0], o.Dilation[0])
	ow := kernels.ConvOut(wd, kw, o.Stride[1], o.Padding[1], o.Dilation[1])
	out = make([]float64, n*oc*oh*ow)
	for in := 0; in < n; in++ {
		for q := 0; q < oc; q++ {
			grp := q / og
			for y := 0; y < oh; y++ {
				for xo := 0; xo < ow; xo++ {
					var s float64
					if b != nil {
						s = float64(b.data[q])
					}
					for ci := 0; ci < cg; ci++ {
						for i := 0; i < kh; i++ {
							for j := 0; j < kw; j++ {
								iy := y*o.Stride[0] + i*o.Dilation[0] - o.Padding[0]
								ix := xo*o.Stride[1] + j*o.Dilation[1] - o.Padding[1]
								if iy < 0 || iy >= h || ix < 0 || ix >= wd {
									continue
								}
								s += float64(x.data[((in*c+grp*cg+ci)*h+iy)*wd+ix]) * float64(w.data[((q*cg+ci)*kh+i)*kw+j])
							}
						}
					}
					out[((in*oc+q)*oh+y)*ow+xo] = s
				}
			}
		}
	}
	return out, []int{n, oc, oh, ow}
}

var convOptCases = []struct {
	name string
	x, w []int
	o    ConvOptions
	bias bool
}{
	{"dilation 2", []int{2, 2, 7, 7}, []int{3, 2, 3, 3}, ConvOptions{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}, true},
	{"dilation 3x2 stride 2x1", []int{1, 2, 11, 9}, []int{2, 2, 3, 2}, ConvOptions{Stride: [2]int{2, 1}, Padding: [2]int{1, 0}, Dilation: [2]int{3, 2}}, false},
	{"groups 2", []int{2, 4, 6, 5}, []int{6, 2, 3, 3}, ConvOptions{Padding: [2]int{1, 1}, Groups: 2}, true},
	{"depthwise stride 2", []int{2, 3, 7, 6}, []int{3, 1, 3, 3}, ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}, Groups: 3}, true},
	{"depthwise multiplier 2 dilated", []int{1, 2, 8, 8}, []int{4, 1, 2, 2}, ConvOptions{Dilation: [2]int{2, 3}, Groups: 2}, true},
	{"groups 2 1x1", []int{2, 4, 3, 4}, []int{4, 2, 1, 1}, ConvOptions{Groups: 2}, true},
}

func TestGradConv2dWith(t *testing.T) {
	rng := NewRNG(61)
	for _, c := range convOptCases {
		x := randT(rng, -1, 1, c.x...)
		w := randT(rng, -1, 1, c.w...)
		var b *Tensor
		ins := []*Tensor{x, w}
		if c.bias {
			b = randT(rng, -1, 1, c.w[0])
			ins = append(ins, b)
		}
		gradCheck(t, "Conv2dWith "+c.name, defaultGC, func() *Tensor { return Conv2dWith(x, w, b, c.o) }, ins...)
	}
}

// TestConv2dWithReference checks the forward against a float64 loop, on one
// goroutine and on several (per-worker weight gradients too: the gradient
// must not depend on the split).
func TestConv2dWithReference(t *testing.T) {
	rng := NewRNG(62)
	for _, c := range convOptCases {
		n := 8 // enough images to split
		xs := append([]int{n}, c.x[1:]...)
		x := randT(rng, -1, 1, xs...)
		w := randT(rng, -1, 1, c.w...)
		b := randT(rng, -1, 1, c.w[0])
		o := c.o
		o.Stride, o.Dilation, o.Groups = orOne(o.Stride), orOne(o.Dilation), max(o.Groups, 1)
		want, shape := convOptRef(x, w, b, o)
		var grads [2][]float32
		for k, threads := range []int{1, 3} {
			func() {
				defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
				x.ZeroGrad()
				w.SetRequiresGrad(true).ZeroGrad()
				y := Conv2dWith(x, w, b, c.o)
				if fmt.Sprint(y.shape) != fmt.Sprint(shape) {
					t.Fatalf("%s: shape %v, want %v", c.name, y.shape, shape)
				}
				for i, v := range y.data {
					if math.Abs(float64(v)-want[i]) > 1e-5*(1+math.Abs(want[i])) {
						t.Fatalf("%s threads %d: y[%d] = %v, reference %v", c.name, threads, i, v, want[i])
					}
				}
				if err := Sum(y, false).Backward(); err != nil {
					t.Fatal(err)
				}
				grads[k] = append([]float32(nil), w.Grad().data...)
			}()
		}
		for i := range grads[0] {
			if d := math.Abs(float64(grads[0][i] - grads[1][i])); d > 1e-5*(1+math.Abs(float64(grads[0][i]))) {
				t.Fatalf("%s: dW[%d] %v on one goroutine, %v on three", c.name, i, grads[0][i], grads[1][i])
			}
		}
	}
}

// TestConv2dWithFused checks that the fused epilogues with groups and
// dilation give bit for bit the separate ops' values and gradients.
func TestConv2dWithFused(t *testing.T) {
	rng := NewRNG(63)
	o := ConvOptions{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}, Groups: 2}
	x0 := randT(rng, -1, 1, 3, 4, 8, 8)
	w0 := randT(rng, -1, 1, 6, 2, 3, 3)
	b0 := randT(rng, -1, 1, 6)
	run := func(fused bool) (y []float32, g [3][]float32) {
		x, w, b := x0.Detach().SetRequiresGrad(true), w0.Detach().SetRequiresGrad(true), b0.Detach().SetRequiresGrad(true)
		var out *Tensor
		if fused {
			out = Conv2dWith(x, w, b, o, PostReLU, PostMaxPool2x2)
		} else {
			out = MaxPool2d(ReLU(Conv2dWith(x, w, b, o)), [2]int{2, 2}, [2]int{2, 2}, [2]int{})
		}
		if err := Sum(Mul(out, out), false).Backward(); err != nil {
			t.Fatal(err)
		}
		return out.Data(), [3][]float32{x.Grad().Data(), w.Grad().Data(), b.Grad().Data()}
	}
	y1, g1 := run(false)
	y2, g2 := run(true)
	if fmt.Sprint(y1) != fmt.Sprint(y2) {
		t.Fatalf("fused output differs")
	}
	for k := range g1 {
		if fmt.Sprint(g1[k]) != fmt.Sprint(g2[k]) {
			t.Fatalf("fused gradient %d differs", k)
		}
	}
}

func TestConv2dWithBadOptions(t *testing.T) {
	x := Zeros(1, 4, 5, 5)
	for _, c := range []struct {
		w    []int
		o    ConvOptions
		want string
	}{
		{[]int{3, 2, 3, 3}, ConvOptions{Groups: 2}, "3 output channels not divisible by 2 groups"},
		{[]int{4, 3, 3, 3}, ConvOptions{Groups: 2}, "does not match weight [4 3 3 3] ([O, C/groups, KH, KW]) with 2 groups"},
		{[]int{2, 4, 3, 3}, ConvOptions{Dilation: [2]int{3, 3}}, "kernel 3x3 (dilation [3 3]) larger than padded input"},
		{[]int{2, 4, 3, 3}, ConvOptions{Dilation: [2]int{-1, 1}}, "invalid stride [1 1], padding [0 0] or dilation [-1 1]"},
	} {
		msg := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			Conv2dWith(x, Zeros(c.w...), nil, c.o)
			return ""
		}()
		if !strings.Contains(msg, c.want) {
			t.Errorf("Conv2dWith(%v, %+v) panic %q, want it to contain %q", c.w, c.o, msg, c.want)
		}
	}
}

// TestConv2dRowBlocks runs convolutions with a tiny L2 budget, so that the
// products go over blocks of one to a few output rows, against the same
// ops in one block: the output bit for bit (every output's sum is the
// same), the gradients up to summation order.
func TestConv2dRowBlocks(t *testing.T) {
	defer func(v bool) { implicitConv = v }(implicitConv)
	implicitConv = false // blocks are the im2col path's
	rng := NewRNG(64)
	cases := append([]struct {
		name string
		x, w []int
		o    ConvOptions
		bias bool
	}{
		{"CNN conv2", []int{3, 8, 12, 12}, []int{16, 8, 3, 3}, ConvOptions{}, true},
		{"stride 2 pad 1", []int{2, 3, 11, 9}, []int{4, 3, 3, 3}, ConvOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, true},
	}, convOptCases...)
	for _, c := range cases {
		for _, ep := range [][]PostOp{nil, {PostReLU}, {PostReLU, PostMaxPool2x2}} {
			x0, w0 := randT(rng, -1, 1, c.x...), randT(rng, -1, 1, c.w...)
			b0 := randT(rng, -1, 1, c.w[0])
			run := func(l2 int) (y []float32, g [3][]float32) {
				defer func(f func() int) { convL2Bytes = f }(convL2Bytes)
				convL2Bytes = func() int { return l2 }
				x, w, b := x0.Detach().SetRequiresGrad(true), w0.Detach().SetRequiresGrad(true), b0.Detach().SetRequiresGrad(true)
				out := Conv2dWith(x, w, b, c.o, ep...)
				if err := Sum(Mul(out, out), false).Backward(); err != nil {
					t.Fatal(err)
				}
				return out.Data(), [3][]float32{x.Grad().Data(), w.Grad().Data(), b.Grad().Data()}
			}
			if len(ep) == 2 && (c.x[2] < 8 || c.x[3] < 8) {
				continue
			}
			y1, g1 := run(1 << 30) // one block
			y2, g2 := run(64)      // one output row per block
			y3, g3 := run(8 * 4 * c.w[1] * c.w[2] * c.w[3] * 20)
			if fmt.Sprint(y1) != fmt.Sprint(y2) || fmt.Sprint(y1) != fmt.Sprint(y3) {
				t.Fatalf("%s %v: blocked output differs", c.name, ep)
			}
			for k := range g1 {
				for i := range g1[k] {
					for _, g := range [][3][]float32{g2, g3} {
						if d := math.Abs(float64(g1[k][i] - g[k][i])); d > 1e-4*(1+math.Abs(float64(g1[k][i]))) {
							t.Fatalf("%s %v: gradient %d[%d] %v in one block, %v in blocks", c.name, ep, k, i, g1[k][i], g[k][i])
						}
					}
				}
			}
		}
	}
}
