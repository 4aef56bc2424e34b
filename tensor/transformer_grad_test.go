package tensor

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// attentionRef is softmax(q·kᵀ/√d + mask)·v built from unfused ops, the
// reference the fused attention is checked against.
func attentionRef(q, k, v *Tensor, causal bool) *Tensor {
	dh := q.Size(-1)
	s := MulScalar(MatMul(q, k, false, true), float32(1/math.Sqrt(float64(dh))))
	if causal {
		tq, tk := q.Size(2), k.Size(2)
		mask := Zeros(tq, tk)
		for i := range tq {
			for j := i + 1; j < tk; j++ {
				mask.data[i*tk+j] = 1
			}
		}
		s = MaskedFill(s, mask, float32(math.Inf(-1)))
	}
	return MatMul(Softmax(s, -1), v, false, false)
}

func TestGradAttention(t *testing.T) {
	rng := NewRNG(7)
	for _, c := range []struct {
		name       string
		b, h, t, d int
		tk         int
		causal     bool
	}{
		{"full", 1, 2, 5, 3, 5, false},
		{"causal", 2, 1, 6, 4, 6, true},
		{"causal_multi_tile", 1, 1, 70, 3, 70, true}, // 70 = one 64-row tile + 6
		{"full_cross_tk", 1, 1, 3, 2, 135, false},    // keys span 2 tiles of 128
	} {
		q, k, v := randT(rng, -1, 1, c.b, c.h, c.t, c.d), randT(rng, -1, 1, c.b, c.h, c.tk, c.d), randT(rng, -1, 1, c.b, c.h, c.tk, c.d)
		// Values against the unfused reference.
		got, want := ScaledDotProductAttention(q, k, v, c.causal), attentionRef(q, k, v, c.causal)
		for i := range got.data {
			if math.Abs(float64(got.data[i]-want.data[i])) > 1e-5 {
				t.Fatalf("%s: out[%d] = %v, reference %v", c.name, i, got.data[i], want.data[i])
			}
		}
		opts := defaultGC
		if c.t*c.tk > 1000 { // keep the finite differences cheap
			opts.eps = 2e-2
		}
		gradCheck(t, "attention_"+c.name, opts, func() *Tensor { return ScaledDotProductAttention(q, k, v, c.causal) }, q, k, v)
	}
}

// TestAttentionLongMatchesReference compares values and gradients with the
// unfused reference at T = 300, several tiles in both directions.
func TestAttentionLongMatchesReference(t *testing.T) {
	rng := NewRNG(8)
	for _, causal := range []bool{false, true} {
		q, k, v := randT(rng, -2, 2, 1, 2, 300, 16), randT(rng, -2, 2, 1, 2, 300, 16), randT(rng, -1, 1, 1, 2, 300, 16)
		w := randT(rng, -1, 1, 1, 2, 300, 16)
		grads := func(f func() *Tensor) (out []float32, g [3][]float32) {
			for _, x := range []*Tensor{q, k, v} {
				x.SetRequiresGrad(true)
				x.SetGrad(nil)
			}
			o := f()
			if err := o.BackwardWith(w); err != nil {
				t.Fatal(err)
			}
			return o.data, [3][]float32{q.grad.data, k.grad.data, v.grad.data}
		}
		o1, g1 := grads(func() *Tensor { return ScaledDotProductAttention(q, k, v, causal) })
		o2, g2 := grads(func() *Tensor { return attentionRef(q, k, v, causal) })
		near := func(what string, a, b []float32) {
			for i := range a {
				if d := math.Abs(float64(a[i] - b[i])); d > 1e-4*(1+math.Abs(float64(b[i]))) {
					t.Fatalf("causal=%v %s[%d] = %v, reference %v", causal, what, i, a[i], b[i])
				}
			}
		}
		near("out", o1, o2)
		near("dq", g1[0], g2[0])
		near("dk", g1[1], g2[1])
		near("dv", g1[2], g2[2])
	}
}

func TestAttentionShapeMismatch(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "[1 2 4 8]") || !strings.Contains(r.(string), "[1 2 4 6]") {
			t.Fatalf("panic %v, want one naming both shapes", r)
		}
	}()
	ScaledDotProductAttention(Zeros(1, 2, 4, 8), Zeros(1, 2, 4, 6), Zeros(1, 2, 4, 6), true)
}

func TestGradLayerNorm(t *testing.T) {
	rng := NewRNG(9)
	x, w, b := randT(rng, -2, 2, 3, 4, 5), randT(rng, 0.5, 1.5, 5), randT(rng, -1, 1, 5)
	gradCheck(t, "layer_norm", defaultGC, func() *Tensor { return LayerNorm(x, w, b, 1e-5) }, x, w, b)
	x2 := randT(rng, -2, 2, 200, 7) // several goroutines' rows
	gradCheck(t, "layer_norm_noaffine", defaultGC, func() *Tensor { return LayerNorm(x2, nil, nil, 1e-5) }, x2)
}

func TestGradEmbedding(t *testing.T) {
	rng := NewRNG(10)
	w := randT(rng, -1, 1, 6, 3)
	ids := []int{1, 4, 1, 1, 0, 5}
	gradCheck(t, "embedding", defaultGC, func() *Tensor { return Embedding(w, ids, 2, 3) }, w)
	out := Embedding(w, ids, 2, 3)
	if s := out.Shape(); len(s) != 3 || s[0] != 2 || s[1] != 3 || s[2] != 3 {
		t.Fatalf("shape %v, want [2 3 3]", s)
	}
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "token id 6") || !strings.Contains(r.(string), "vocabulary size 6") {
			t.Fatalf("panic %v, want one naming id 6 and vocabulary size 6", r)
		}
	}()
	Embedding(w, []int{0, 6}, 2)
}

func TestGradBatchedMatMul(t *testing.T) {
	rng := NewRNG(11)
	for _, c := range []struct {
		a, b   []int
		ta, tb bool
	}{
		{[]int{2, 3, 4}, []int{2, 4, 5}, false, false},
		{[]int{2, 4, 3}, []int{2, 5, 4}, true, true},
		{[]int{2, 1, 3, 4}, []int{3, 4, 2}, false, false}, // both broadcast
		{[]int{3, 4}, []int{2, 2, 5, 4}, false, true},     // 2-d a over a batch
		{[]int{2, 3, 3, 4}, []int{4, 5}, false, false},    // 2-d b
	} {
		a, b := randT(rng, -1, 1, c.a...), randT(rng, -1, 1, c.b...)
		gradCheck(t, "batched_matmul", defaultGC, func() *Tensor { return MatMul(a, b, c.ta, c.tb) }, a, b)
	}
}

func TestGradTransformerMisc(t *testing.T) {
	rng := NewRNG(12)
	x := randT(rng, -3, 3, 2, 3, 4)
	gradCheck(t, "gelu_tanh", defaultGC, func() *Tensor { return GELUTanh(x) }, x)
	gradCheck(t, "transpose_dims", defaultGC, func() *Tensor { return TransposeDims(x, 0, -1) }, x)
	mask := New([]float32{1, 0, 0, 1}, 4)
	gradCheck(t, "masked_fill", defaultGC, func() *Tensor { return MaskedFill(x, mask, -5) }, x)
	gradCheck(t, "unbind0", defaultGC, func() *Tensor { p := Unbind(x, 0); return Mul(p[0], p[1]) }, x)
	gradCheck(t, "unbind1", defaultGC, func() *Tensor { p := Unbind(x, 1); return Add(p[0], p[2]) }, x)
}

func TestGradCrossEntropyIgnore(t *testing.T) {
	rng := NewRNG(13)
	logits := randT(rng, -2, 2, 2, 3, 5)
	target := []int{1, -100, 4, 0, -100, 2}
	for _, red := range []string{"mean", "sum"} {
		gradCheck(t, "cross_entropy_ignore_"+red, defaultGC, func() *Tensor {
			return CrossEntropyIgnore(logits, target, -100, red)
		}, logits)
	}
	// Equal to CrossEntropy over the rows kept.
	var rows []float32
	var kept []int
	for i, tg := range target {
		if tg != -100 {
			rows = append(rows, logits.data[i*5:(i+1)*5]...)
			kept = append(kept, tg)
		}
	}
	got := CrossEntropyIgnore(logits, target, -100, "mean").Item()
	want := CrossEntropy(New(rows, len(kept), 5), kept, "mean").Item()
	if math.Abs(float64(got-want)) > 1e-6 {
		t.Fatalf("mean loss %v, CrossEntropy over kept rows %v", got, want)
	}
	if v := CrossEntropyIgnore(logits, []int{-1, -1, -1, -1, -1, -1}, -1, "mean").Item(); v == v {
		t.Fatalf("all ignored: loss %v, want NaN", v)
	}
}

// TestCrossEntropyIgnoreFreshGradient checks the backward pass that
// writes a fresh gradient buffer (logits computed by an op, large enough
// for pooled buffers whose contents are left over from earlier use)
// against the one that adds into a leaf's gradient, ignored rows included.
func TestCrossEntropyIgnoreFreshGradient(t *testing.T) {
	rng := NewRNG(14)
	const n, c = 300, 37
	leaf := randT(rng, -3, 3, n, c)
	target := make([]int, n)
	for i := range target {
		target[i] = rng.Intn(c)
		if i%7 == 3 {
			target[i] = -1
		}
	}
	leaf.SetRequiresGrad(true)
	if err := CrossEntropyIgnore(leaf, target, -1, "mean").Backward(); err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), leaf.grad.data...)
	for range 2 {
		y := leaf.Detach()
		y.SetRequiresGrad(true)
		// Leaves pooled buffers of n·c full of non-zero gradients.
		if err := Sum(MulScalar(y, 3), false).Backward(); err != nil {
			t.Fatal(err)
		}
		y.SetGrad(nil)
		l := MulScalar(y, 1)
		if err := CrossEntropyIgnore(l, target, -1, "mean").Backward(); err != nil {
			t.Fatal(err)
		}
		for i, g := range y.grad.data {
			if math.Abs(float64(g-want[i])) > 1e-6 {
				t.Fatalf("fresh-buffer gradient[%d] = %v, leaf's %v", i, g, want[i])
			}
		}
	}
}

// TestPermuteViews checks that a permutation moving only size-1
// dimensions is a view, and that others copy with the right values.
func TestPermuteViews(t *testing.T) {
	x := New([]float32{1, 2, 3, 4, 5, 6}, 2, 1, 3)
	v := TransposeDims(x, 0, 1) // [1, 2, 3]: same order
	if &v.Data()[0] != &x.Data()[0] || v.Size(0) != 1 || v.Size(1) != 2 {
		t.Fatalf("TransposeDims of a size-1 dim: shape %v, shares data %v", v.Shape(), &v.Data()[0] == &x.Data()[0])
	}
	c := TransposeDims(x, 0, 2) // [3, 1, 2]
	if &c.Data()[0] == &x.Data()[0] || fmt.Sprint(c.Data()) != "[1 4 2 5 3 6]" {
		t.Fatalf("TransposeDims(0, 2) = %v", c.Data())
	}
	rng := NewRNG(14)
	y := randT(rng, -1, 1, 1, 3, 1, 2)
	gradCheck(t, "permute_view", defaultGC, func() *Tensor { return Mul(Permute(y, 2, 1, 0, 3), Permute(y, 0, 2, 1, 3)) }, y)
}

// attentionQKVRef is SelfAttentionQKV by way of copies: the heads split
// out of qkv with Permute, ScaledDotProductAttention, and merged back.
func attentionQKVRef(qkv *Tensor, heads int, causal bool) *Tensor {
	b, t, c := qkv.Size(0), qkv.Size(1), qkv.Size(2)/3
	parts := Unbind(Permute(qkv.Reshape(b, t, 3, heads, c/heads), 2, 0, 3, 1, 4), 0)
	y := ScaledDotProductAttention(parts[0], parts[1], parts[2], causal)
	return Permute(y, 0, 2, 1, 3).Reshape(b, t, c)
}

// TestSelfAttentionQKVMatchesPermuted compares the strided attention on a
// fused qkv tensor with the permuted copies it replaces, values and
// gradients, at T within one tile, across tiles (not a multiple of the
// tile) and with odd head widths, with and without the causal mask; the
// gradient buffer is fresh in one call and added to in another.
func TestSelfAttentionQKVMatchesPermuted(t *testing.T) {
	rng := NewRNG(12)
	for _, c := range []struct{ b, t, heads, dh int }{
		{2, 5, 3, 4}, {1, 70, 2, 5}, {2, 130, 4, 8}, {1, 129, 1, 32},
	} {
		for _, causal := range []bool{false, true} {
			name := fmt.Sprintf("B=%d T=%d H=%d Dh=%d causal=%v", c.b, c.t, c.heads, c.dh, causal)
			qkv := randT(rng, -2, 2, c.b, c.t, 3*c.heads*c.dh)
			w := randT(rng, -1, 1, c.b, c.t, c.heads*c.dh)
			run := func(f func(*Tensor) *Tensor, twice bool) (out, grad []float32) {
				qkv.SetRequiresGrad(true)
				qkv.SetGrad(nil)
				// Through an op first, so that qkv's gradient is a
				// pass-local buffer (fresh, or added to with twice).
				x := MulScalar(qkv, 1)
				o := f(x)
				y := o
				if twice {
					y = Add(o, f(x))
				}
				if err := y.BackwardWith(w); err != nil {
					t.Fatal(err)
				}
				return o.data, qkv.grad.data
			}
			for _, twice := range []bool{false, true} {
				o1, g1 := run(func(x *Tensor) *Tensor { return SelfAttentionQKV(x, c.heads, causal) }, twice)
				o2, g2 := run(func(x *Tensor) *Tensor { return attentionQKVRef(x, c.heads, causal) }, twice)
				for i := range o2 {
					if d := math.Abs(float64(o1[i] - o2[i])); d > 1e-5*(1+math.Abs(float64(o2[i]))) {
						t.Fatalf("%s: out[%d] = %v, permuted %v", name, i, o1[i], o2[i])
					}
				}
				for i := range g2 {
					if d := math.Abs(float64(g1[i] - g2[i])); d > 1e-5*(1+math.Abs(float64(g2[i]))) {
						t.Fatalf("%s twice=%v: dqkv[%d] = %v, permuted %v", name, twice, i, g1[i], g2[i])
					}
				}
			}
		}
	}
	qkv := randT(rng, -1, 1, 2, 6, 3*2*3)
	gradCheck(t, "self_attention_qkv", defaultGC, func() *Tensor { return SelfAttentionQKV(qkv, 2, true) }, qkv)
}

func TestSelfAttentionQKVShape(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "[2 4 20]") || !strings.Contains(r.(string), "3 heads") {
			t.Fatalf("panic %v, want one naming the shape and the heads", r)
		}
	}()
	SelfAttentionQKV(Zeros(2, 4, 20), 3, true)
}
