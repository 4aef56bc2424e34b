package tensor

import (
	"math"
	"testing"
)

// maxAbsDiff is the largest |a[i] − b[i]| and the largest |b[i]|.
func maxAbsDiff(a, b []float32) (diff, scale float64) {
	for i := range a {
		diff = max(diff, math.Abs(float64(a[i])-float64(b[i])))
		scale = max(scale, math.Abs(float64(b[i])))
	}
	return diff, scale
}

// runAutocast runs f on fresh leaves holding ins' values in precision p
// (emulated or not), then its backward from a fixed output gradient, and
// returns the output and the leaves with their gradients.
func runAutocast(t *testing.T, ins []*Tensor, f func(in []*Tensor) *Tensor, p Precision, emulated bool) (*Tensor, []*Tensor) {
	t.Helper()
	defer SetBF16Emulation(SetBF16Emulation(emulated))
	var leaves []*Tensor
	for _, in := range ins {
		leaves = append(leaves, in.Detach().SetRequiresGrad(true))
	}
	var y *Tensor
	if err := Autocast(p, func() { y = f(leaves) }); err != nil {
		t.Fatal(err)
	}
	g := Zeros(y.shape...)
	for i := range g.data {
		g.data[i] = float32(math.Sin(float64(i)))
	}
	if err := y.BackwardWith(g); err != nil {
		t.Fatal(err)
	}
	return y, leaves
}

// TestAutocastNative: on the native bf16 kernel, every autocast op gives
// the emulated results (rounded operands, float32 GEMM) up to summation
// order — far closer to them than to plain float32 — forward and
// backward, for inputs, weights and biases.
func TestAutocastNative(t *testing.T) {
	if !BF16Native() {
		t.Skip("no native bf16 kernel on this CPU")
	}
	rng := NewRNG(5)
	x := randT(rng, -1, 1, 4, 3, 13, 11)
	cw, cb := randT(rng, -1, 1, 8, 3, 3, 3), randT(rng, -1, 1, 8)
	lx := randT(rng, -1, 1, 37, 70)
	lw, lb := randT(rng, -1, 1, 45, 70), randT(rng, -1, 1, 45)
	tw := randT(rng, -1, 1, 45, 19)
	ba, bb := randT(rng, -1, 1, 2, 3, 33, 40), randT(rng, -1, 1, 2, 3, 40, 17)
	cases := []struct {
		name string
		ins  []*Tensor
		f    func(in []*Tensor) *Tensor
	}{
		{"Conv2d", []*Tensor{x, cw, cb}, func(in []*Tensor) *Tensor {
			return Conv2dWith(in[0], in[1], in[2], ConvOptions{Padding: [2]int{1, 1}})
		}},
		{"Conv2d stride 2", []*Tensor{x, cw, cb}, func(in []*Tensor) *Tensor {
			return Conv2dWith(in[0], in[1], in[2], ConvOptions{Stride: [2]int{2, 2}})
		}},
		{"Linear", []*Tensor{lx, lw, lb}, func(in []*Tensor) *Tensor { return Linear(in[0], in[1], in[2]) }},
		{"MatMul NT", []*Tensor{lx, lw}, func(in []*Tensor) *Tensor { return MatMul(in[0], in[1], false, true) }},
		{"MatMul TN", []*Tensor{lw, tw}, func(in []*Tensor) *Tensor { return MatMul(in[0], in[1], true, false) }},
		{"batched MatMul", []*Tensor{ba, bb}, func(in []*Tensor) *Tensor { return MatMul(in[0], in[1], false, false) }},
	}
	for _, c := range cases {
		run := func(p Precision, emulated bool) (*Tensor, []*Tensor) { return runAutocast(t, c.ins, c.f, p, emulated) }
		yn, ln := run(BF16, false)
		ye, le := run(BF16, true)
		yf, lf := run(FP32, false)
		check := func(what string, native, emulated, fp32 []float32) {
			d, scale := maxAbsDiff(native, emulated)
			dfp, _ := maxAbsDiff(fp32, emulated)
			if d > 1e-5*scale || d > dfp/20 {
				t.Errorf("%s %s: native differs from emulated by %.3g (scale %.3g; float32 differs by %.3g)", c.name, what, d, scale, dfp)
			}
		}
		check("output", yn.data, ye.data, yf.data)
		for i := range ln {
			check("gradient "+string(rune('0'+i)), ln[i].Grad().data, le[i].Grad().data, lf[i].Grad().data)
		}
	}
}

// TestAutocastNativeAttention: on the native kernel the fused attention
// also rounds the probabilities and the scores' gradient for its block
// products (as PyTorch's bf16 kernel does), which emulation keeps in
// float32: the two agree to bf16's precision, forward and backward, in
// both layouts, causal or not, at lengths that are not multiples of the
// blocks; and the native results are not float32's.
func TestAutocastNativeAttention(t *testing.T) {
	if !BF16Native() {
		t.Skip("no native bf16 kernel on this CPU")
	}
	rng := NewRNG(29)
	q, k, v := randT(rng, -1, 1, 2, 3, 70, 32), randT(rng, -1, 1, 2, 3, 70, 32), randT(rng, -1, 1, 2, 3, 70, 32)
	qkv := randT(rng, -1, 1, 2, 77, 3*4*16)
	for _, causal := range []bool{false, true} {
		cases := []struct {
			name string
			ins  []*Tensor
			f    func(in []*Tensor) *Tensor
		}{
			{"ScaledDotProductAttention", []*Tensor{q, k, v}, func(in []*Tensor) *Tensor {
				return ScaledDotProductAttention(in[0], in[1], in[2], causal)
			}},
			{"SelfAttentionQKV", []*Tensor{qkv}, func(in []*Tensor) *Tensor { return SelfAttentionQKV(in[0], 4, causal) }},
		}
		for _, c := range cases {
			run := func(p Precision, emulated bool) (*Tensor, []*Tensor) { return runAutocast(t, c.ins, c.f, p, emulated) }
			yn, ln := run(BF16, false)
			ye, le := run(BF16, true)
			yf, _ := run(FP32, false)
			check := func(what string, native, emulated []float32) {
				d, scale := maxAbsDiff(native, emulated)
				if d > 1e-2*scale {
					t.Errorf("%s causal=%v %s: native differs from emulated by %.3g (scale %.3g)", c.name, causal, what, d, scale)
				}
			}
			check("output", yn.data, ye.data)
			for i := range ln {
				check("gradient", ln[i].Grad().data, le[i].Grad().data)
			}
			if d, _ := maxAbsDiff(yn.data, yf.data); d == 0 {
				t.Errorf("%s causal=%v: native output equals float32's: bf16 did not take effect", c.name, causal)
			}
		}
	}
}
