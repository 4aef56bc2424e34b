package tensor

import (
	"fmt"
	"math"
	"testing"
)

// TestAttentionCausalBlocksMatchReference checks causal attention whose
// query and key lengths cut the query and key blocks at different places
// (fewer queries than keys, more, and equal lengths that are not a
// multiple of a block) against the unfused reference, values and the
// gradients of q, k and v: the products of each block stop at the last
// key its last query row sees, and the key blocks' gradients are summed
// over the query blocks from the last one up.
func TestAttentionCausalBlocksMatchReference(t *testing.T) {
	rng := NewRNG(41)
	for _, c := range []struct{ tq, tk int }{
		{45, 300}, {300, 45}, {161, 161}, {33, 33}, {1, 140},
	} {
		checkAttentionMatchesRef(t, rng, fmt.Sprintf("Tq=%d Tk=%d", c.tq, c.tk), 1, 2, 8, c.tq, c.tk, true)
	}
}

// checkAttentionMatchesRef runs ScaledDotProductAttention on random q, k
// and v of [b, h, tq or tk, dh] against the unfused reference, forward and
// backward, within float32 rounding.
func checkAttentionMatchesRef(t *testing.T, rng *RNG, name string, b, h, dh, tq, tk int, causal bool) {
	t.Helper()
	q, k, v := randT(rng, -2, 2, b, h, tq, dh), randT(rng, -2, 2, b, h, tk, dh), randT(rng, -1, 1, b, h, tk, dh)
	w := randT(rng, -1, 1, b, h, tq, dh)
	run := func(f func() *Tensor) (out []float32, grads [3][]float32) {
		for _, x := range []*Tensor{q, k, v} {
			x.SetRequiresGrad(true)
			x.SetGrad(nil)
		}
		o := f()
		out = append([]float32(nil), o.data...)
		if err := o.BackwardWith(w); err != nil {
			t.Fatal(err)
		}
		for i, x := range []*Tensor{q, k, v} {
			grads[i] = append([]float32(nil), x.Grad().data...)
		}
		return out, grads
	}
	got, gotG := run(func() *Tensor { return ScaledDotProductAttention(q, k, v, causal) })
	want, wantG := run(func() *Tensor { return attentionRef(q, k, v, causal) })
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s: out[%d] = %v, reference %v", name, i, got[i], want[i])
		}
	}
	for j, g := range wantG {
		for i := range g {
			if d := math.Abs(float64(gotG[j][i] - g[i])); d > 2e-5*(1+math.Abs(float64(g[i]))) {
				t.Fatalf("%s: d%c[%d] = %v, reference %v", name, "qkv"[j], i, gotG[j][i], g[i])
			}
		}
	}
}

// packedAttention runs the packed causal attention of qkv with heads
// heads, then its backward from upstream gradient w, and returns copies of
// the output and of qkv's gradient.
func packedAttention(t *testing.T, qkv, w *Tensor, heads int) (out, grad []float32) {
	t.Helper()
	qkv.SetRequiresGrad(true)
	qkv.SetGrad(nil)
	o := SelfAttentionQKV(MulScalar(qkv, 1), heads, true)
	out = append([]float32(nil), o.data...)
	if err := o.BackwardWith(w); err != nil {
		t.Fatal(err)
	}
	return out, append([]float32(nil), qkv.Grad().data...)
}

// TestAttentionDeterministic checks that two runs of the packed causal
// attention give the same bits, forward and backward.
func TestAttentionDeterministic(t *testing.T) {
	rng := NewRNG(42)
	qkv := randT(rng, -2, 2, 2, 150, 3*4*8)
	w := randT(rng, -1, 1, 2, 150, 4*8)
	o1, g1 := packedAttention(t, qkv, w, 4)
	o2, g2 := packedAttention(t, qkv, w, 4)
	for i := range o1 {
		if math.Float32bits(o1[i]) != math.Float32bits(o2[i]) {
			t.Fatalf("out[%d]: %v then %v", i, o1[i], o2[i])
		}
	}
	for i := range g1 {
		if math.Float32bits(g1[i]) != math.Float32bits(g2[i]) {
			t.Fatalf("dqkv[%d]: %v then %v", i, g1[i], g2[i])
		}
	}
}
