package tensor

import (
	"slices"
	"testing"
)

// autocastCase is an op checked against float32 on bf16-rounded operands.
type autocastCase struct {
	name string
	ins  []*Tensor
	f    func(in []*Tensor) *Tensor
}

// checkAutocastBitExact runs c under emulated bf16 autocast (backward
// after Autocast returned) and in float32 on rounded inputs with a
// rounded output gradient: outputs and input gradients must agree bit
// for bit, and differ from plain float32's, so that the rounding is seen
// to happen.
func checkAutocastBitExact(t *testing.T, rng *RNG, c autocastCase) {
	t.Helper()
	leaves := func(round bool) []*Tensor {
		var l []*Tensor
		for _, x := range c.ins {
			if round {
				x = roundedT(x)
			}
			l = append(l, x.Detach().SetRequiresGrad(true))
		}
		return l
	}
	a := leaves(false)
	var ya *Tensor
	withEmulation(t, func() { ya = c.f(a) })
	gout := randT(rng, -2, 2, ya.shape...)
	if err := ya.BackwardWith(gout); err != nil {
		t.Fatal(err)
	}
	r := leaves(true)
	yr := c.f(r)
	if err := yr.BackwardWith(roundedT(gout)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ya.data, yr.data) {
		t.Fatalf("%s: autocast output differs from float32 on rounded operands", c.name)
	}
	for k := range a {
		if !slices.Equal(a[k].Grad().data, r[k].Grad().data) {
			t.Fatalf("%s: autocast gradient of input %d differs from float32 on rounded operands", c.name, k)
		}
	}
	p := leaves(false)
	yp := c.f(p)
	if slices.Equal(ya.data, yp.data) {
		t.Fatalf("%s: autocast output equals plain float32's: nothing was rounded", c.name)
	}
}

// TestAutocastAttention: under bf16 autocast the fused attention is the
// float32 op on q, k and v rounded to bf16, with the incoming gradient
// rounded, causal or not, with more keys than queries.
func TestAutocastAttention(t *testing.T) {
	rng := NewRNG(17)
	for _, causal := range []bool{false, true} {
		q, k, v := randT(rng, -1, 1, 2, 3, 70, 8), randT(rng, -1, 1, 2, 3, 70, 8), randT(rng, -1, 1, 2, 3, 70, 8)
		checkAutocastBitExact(t, rng, autocastCase{"attention", []*Tensor{q, k, v}, func(in []*Tensor) *Tensor {
			return ScaledDotProductAttention(in[0], in[1], in[2], causal)
		}})
	}
	q, kv := randT(rng, -1, 1, 1, 2, 5, 4), randT(rng, -1, 1, 1, 2, 9, 4)
	checkAutocastBitExact(t, rng, autocastCase{"attention Tq<Tk", []*Tensor{q, kv, Neg(kv).Detach()}, func(in []*Tensor) *Tensor {
		return ScaledDotProductAttention(in[0], in[1], in[2], false)
	}})
}

// TestAutocastSelfAttentionQKV: the fused self-attention over one qkv
// projection rounds that projection and the incoming gradient, causal or
// not.
func TestAutocastSelfAttentionQKV(t *testing.T) {
	rng := NewRNG(19)
	for _, causal := range []bool{false, true} {
		qkv := randT(rng, -1, 1, 2, 70, 3*3*8)
		checkAutocastBitExact(t, rng, autocastCase{"self-attention qkv", []*Tensor{qkv}, func(in []*Tensor) *Tensor {
			return SelfAttentionQKV(in[0], 3, causal)
		}})
	}
}

// TestAutocastBatchedMatMul: batched products (attention with dropout
// multiplies [B, H, T, T] scores by hand) round like 2-D MatMul, with a
// broadcast operand too.
func TestAutocastBatchedMatMul(t *testing.T) {
	rng := NewRNG(23)
	a, b, w := randT(rng, -1, 1, 2, 3, 5, 7), randT(rng, -1, 1, 2, 3, 6, 7), randT(rng, -1, 1, 7, 4)
	checkAutocastBitExact(t, rng, autocastCase{"batched MatMul", []*Tensor{a, b}, func(in []*Tensor) *Tensor {
		return MatMul(in[0], in[1], false, true)
	}})
	checkAutocastBitExact(t, rng, autocastCase{"broadcast MatMul", []*Tensor{a, w}, func(in []*Tensor) *Tensor {
		return MatMul(in[0], in[1], false, false)
	}})
}

// TestAutocastAttentionInLayer is attention as a transformer layer calls
// it: q, k and v are views of one projection (Unbind of a permuted
// tensor), and the caller recycles the output before backward (as nn
// does). Gradients must match the unrecycled run over several steps,
// with the pool's buffers reused in between, and be float32 (not all on
// the bf16 grid).
func TestAutocastAttentionInLayer(t *testing.T) {
	rng := NewRNG(29)
	// The output is as large as causal attention's backward scratch
	// (2·attnBr·attnBcCausal), so storage handed back too early is
	// reused, and overwritten, by that very backward.
	const b, h, dh = 2, 4, 16
	const tt = 2 * attnBr * attnBcCausal / (b * h * dh)
	x := randT(rng, -1, 1, b, tt, 3, h, dh).SetRequiresGrad(true)
	gw := randT(rng, -1, 1, b, h, tt, dh)
	step := func(recycle bool) (out, grad []float32) {
		x.SetGrad(nil)
		var y *Tensor
		withEmulation(t, func() {
			parts := Unbind(Permute(x, 2, 0, 3, 1, 4), 0)
			att := ScaledDotProductAttention(parts[0], parts[1], parts[2], true)
			y = Mul(att, gw)
			if recycle {
				att.freeWithGraph()
			}
		})
		out = slices.Clone(y.data)
		if err := Sum(y, false).Backward(); err != nil {
			t.Fatal(err)
		}
		return out, slices.Clone(x.Grad().data)
	}
	wantOut, wantGrad := step(false)
	for i := range 3 {
		out, grad := step(true)
		if !slices.Equal(out, wantOut) || !slices.Equal(grad, wantGrad) {
			t.Fatalf("step %d: recycling the autocast attention's output changed the results", i)
		}
	}
	offGrid := 0
	for _, g := range wantGrad {
		if ToBFloat16(g).Float32() != g {
			offGrid++
		}
	}
	if offGrid == 0 {
		t.Fatal("every gradient of q, k and v is a bf16 number: the gradients are not float32")
	}
	if AutocastPrecision() != FP32 {
		t.Fatal("autocast left on")
	}
}
