package tensor

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// inputGradRef is the input gradient of a stride-1 convolution of x
// [N, C, H, W] by w with options o, for the output gradient r, in float64.
func inputGradRef(x, w, r *Tensor, o ConvOptions) []float64 {
	n, c, h, wd := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	oc, cg, kh, kw := w.shape[0], w.shape[1], w.shape[2], w.shape[3]
	oh, ow := r.shape[2], r.shape[3]
	og := oc / o.Groups
	dx := make([]float64, n*c*h*wd)
	for b := range n {
		for q := range oc {
			grp := q / og
			for ci := range cg {
				cIn := grp*cg + ci
				for i := range kh {
					for j := range kw {
						wv := float64(w.data[((q*cg+ci)*kh+i)*kw+j])
						for y := range oh {
							iy := y - o.Padding[0] + i*o.Dilation[0]
							if iy < 0 || iy >= h {
								continue
							}
							for xx := range ow {
								ix := xx - o.Padding[1] + j*o.Dilation[1]
								if ix < 0 || ix >= wd {
									continue
								}
								dx[((b*c+cIn)*h+iy)*wd+ix] += wv * float64(r.data[((b*oc+q)*oh+y)*ow+xx])
							}
						}
					}
				}
			}
		}
	}
	return dx
}

// TestConvInputGradAsConv checks the input gradient of stride-1
// convolutions run as the transposed convolution against the float64
// loop and against the column-gradient form: odd sizes, padding, dilation
// and groups, rows under and over 16 pixels, images stacked side by side
// (ResNet's 8×8 and 4×4 planes), padding past the kernel (which keeps to
// the column gradients), on one thread and two, into a fresh gradient and
// one that accumulates.
func TestConvInputGradAsConv(t *testing.T) {
	if !kernels.ImplicitConv() {
		t.Skip("no implicit-GEMM kernels on this CPU")
	}
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	defer func(v bool) { inputGradAsConv = v }(inputGradAsConv)
	// Every channel count, not only the wide layers'.
	defer func(v int) { inputGradConvMinChannels = v }(inputGradConvMinChannels)
	inputGradConvMinChannels = 0
	type tc struct {
		name string
		x, w []int
		o    ConvOptions
	}
	cases := []tc{
		{"ResNet 4x4 stacked", []int{8, 16, 4, 4}, []int{16, 16, 3, 3}, ConvOptions{Padding: [2]int{1, 1}}},
		{"ResNet 8x8 stacked", []int{4, 8, 8, 8}, []int{12, 8, 3, 3}, ConvOptions{Padding: [2]int{1, 1}}},
		{"ResNet 32x32", []int{2, 8, 32, 32}, []int{8, 8, 3, 3}, ConvOptions{Padding: [2]int{1, 1}}},
		{"pad past the kernel", []int{2, 3, 6, 18}, []int{4, 3, 3, 3}, ConvOptions{Padding: [2]int{3, 1}}},
		{"1x1 padded", []int{2, 3, 5, 7}, []int{4, 3, 1, 1}, ConvOptions{Padding: [2]int{1, 1}}},
	}
	for _, c := range implicitCases {
		if c.o.Stride == [2]int{} || c.o.Stride == [2]int{1, 1} {
			cases = append(cases, tc{c.name, c.x, c.w, c.o})
		}
	}
	rng := NewRNG(91)
	for _, c := range cases {
		o := c.o
		o.Stride, o.Dilation, o.Groups = orOne(o.Stride), orOne(o.Dilation), max(o.Groups, 1)
		x0, w0 := randT(rng, -1, 1, c.x...), randT(rng, -1, 1, c.w...)
		oh := kernels.ConvOut(c.x[2], c.w[2], 1, o.Padding[0], o.Dilation[0])
		ow := kernels.ConvOut(c.x[3], c.w[3], 1, o.Padding[1], o.Dilation[1])
		r := randT(rng, -1, 1, c.x[0], c.w[0], oh, ow)
		ref := inputGradRef(x0, w0, r, o)
		scale := 0.0
		for _, v := range ref {
			scale = max(scale, math.Abs(v))
		}
		for _, threads := range []int{1, 2} {
			for _, leaf := range []bool{true, false} {
				run := func(asConv bool) []float32 {
					inputGradAsConv = asConv
					kernels.SetNumThreads(threads)
					x := x0.Detach().SetRequiresGrad(true)
					in := x
					if !leaf {
						in = MulScalar(x, 1)
					} else if err := Sum(MulScalar(x, 2), false).Backward(); err != nil {
						// A gradient of 2 already there must be added to.
						t.Fatal(err)
					}
					out := Conv2dWith(in, w0, nil, o)
					if err := Sum(Mul(out, r), false).Backward(); err != nil {
						t.Fatal(err)
					}
					return x.Grad().Data()
				}
				got, cols := run(true), run(false)
				for i, want := range ref {
					if leaf {
						want += 2
					}
					if d := math.Abs(float64(got[i]) - want); d > 1e-5*(1+scale) {
						t.Fatalf("%s threads %d leaf %v: dx[%d] %v, reference %v", c.name, threads, leaf, i, got[i], want)
					}
					if d := math.Abs(float64(got[i] - cols[i])); d > 1e-5*(1+scale) {
						t.Fatalf("%s threads %d leaf %v: dx[%d] %v as a convolution, %v as column gradients", c.name, threads, leaf, i, got[i], cols[i])
					}
				}
			}
		}
	}
}

// TestInputGradConvGeometry checks the transposed convolution's geometry:
// its output is the input's size, and padding past the dilated kernel,
// a stride or fewer than inputGradConvMinChannels input channels keep to
// the column gradients.
func TestInputGradConvGeometry(t *testing.T) {
	wide := inputGradConvMinChannels
	for _, c := range []struct {
		c, h, k, p, d, s int
		ok               bool
	}{
		{wide, 32, 3, 1, 1, 1, true}, {2 * wide, 4, 3, 1, 1, 1, true}, {wide, 12, 3, 2, 2, 1, true},
		{wide, 9, 1, 0, 1, 1, true}, {wide, 9, 1, 1, 1, 1, false}, {wide, 9, 3, 3, 1, 1, false},
		{wide, 9, 3, 1, 1, 2, false}, {wide - 1, 32, 3, 1, 1, 1, false},
	} {
		g := convGeom{n: 1, c: c.c, h: c.h, w: c.h, o: 3, kh: c.k, kw: c.k, sh: c.s, sw: c.s, ph: c.p, pw: c.p, dh: c.d, dw: c.d, groups: 1}
		g.oh = kernels.ConvOut(g.h, g.kh, g.sh, g.ph, g.dh)
		g.ow = kernels.ConvOut(g.w, g.kw, g.sw, g.pw, g.dw)
		tg, ok := g.inputGradConv()
		if ok != c.ok {
			t.Fatalf("%+v: as a convolution %v, want %v", c, ok, c.ok)
		}
		if !ok {
			continue
		}
		if got := kernels.ConvOut(tg.h, tg.kh, 1, tg.ph, tg.dh); got != g.h || tg.oh != g.h || tg.c != g.o || tg.o != g.c {
			t.Fatalf("%+v: transposed convolution %+v gives %d rows, want %d", c, tg, got, g.h)
		}
	}
}
