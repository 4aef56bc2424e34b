package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// attentionAutocast is ScaledDotProductAttention under emulated bf16
// autocast (ok is false, and nothing done, outside it, and on the native
// kernel). PyTorch's CPU autocast runs scaled_dot_product_attention in
// bf16. On the native kernel the fused op runs its block products on it
// (kernels.SgemmBF16Serial), which rounds each operand as it packs it: q
// and k for the scores, the probabilities and v for P·V, and backward the
// incoming gradient, the probabilities and the scores' gradient, as
// PyTorch's bf16 kernel does; the softmax and every sum stay float32.
// Emulated, the products' outer operands are rounded, q, k and v forward
// and the incoming gradient backward, and the fused float32 op runs on
// them: the blocks it forms inside stay float32, so emulation is there
// slightly more exact than the native kernel and PyTorch. The gradients
// reaching q, k and v are float32, the rounding counted as the identity
// (as the gradient of autocast's cast is).
func attentionAutocast(q, k, v *Tensor, causal bool) (y *Tensor, ok bool) {
	return autocastRounded([]*Tensor{q, k, v}, func(r []*Tensor) *Tensor {
		return ScaledDotProductAttention(r[0], r[1], r[2], causal)
	})
}

// selfAttentionAutocast is SelfAttentionQKV under emulated bf16 autocast,
// rounded as attentionAutocast is: the one qkv projection forward, the
// incoming gradient backward.
func selfAttentionAutocast(qkv *Tensor, heads int, causal bool) (y *Tensor, ok bool) {
	return autocastRounded([]*Tensor{qkv}, func(r []*Tensor) *Tensor {
		return SelfAttentionQKV(r[0], heads, causal)
	})
}

// autocastRounded runs op in float32 on ins rounded to bf16, and rounds
// the gradient reaching its output; ok is false, and nothing done,
// outside emulated bf16 autocast (on the native kernel the op rounds as
// it multiplies).
func autocastRounded(ins []*Tensor, op func(rounded []*Tensor) *Tensor) (y *Tensor, ok bool) {
	if c := newBF16Cast(); c == nil || c.native {
		return nil, false
	}
	rs := make([]*Tensor, len(ins))
	for i, x := range ins {
		rs[i] = bf16Operand(x)
	}
	// The op itself in float32: autocast's rounding is done.
	prev := Precision(autocast.Swap(int32(FP32)))
	inner := op(rs)
	autocast.Store(int32(prev))
	y = bf16RoundedGrad(inner)
	if y.node == nil { // no backward will read them
		for _, t := range append(rs, inner) {
			putBuf(t.data)
			t.data = nil
		}
		return y, true
	}
	// Only the op's backward reads its output: y is a copy, which the
	// caller may recycle (nn does) before that backward has run.
	inner.freeWithGraph()
	return y, true
}

// bf16Operand returns x rounded to bf16 in a pooled buffer, recorded so
// that x's gradient is the rounded tensor's, unchanged. The buffer goes
// back to the pool once the backward of the op reading it has run (that
// op comes later in the graph); without a graph the caller hands it back.
func bf16Operand(x *Tensor) *Tensor {
	r := &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	kernels.RoundBF16(r.data, x.data)
	r = record(r, "bf16_round", func(g []float32) { passGradOn(x, r, g) }, x)
	r.freeWithGraph()
	return r
}

// bf16RoundedGrad returns a copy of x whose backward rounds the incoming
// gradient to bf16 before handing it to x: the gradient operand of x's
// products, rounded as autocast's MatMul rounds its own.
func bf16RoundedGrad(x *Tensor) *Tensor {
	y := &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	copy(y.data, x.data)
	return record(y, "bf16_round_grad", func(g []float32) {
		kernels.RoundBF16(g, g) // g is y's own pass-local gradient: nothing reads it after this
		passGradOn(x, y, g)
	}, x)
}

// passGradOn adds g, the gradient of out, into in's gradient, handing
// out's pass-local buffer on to in when g is it and in has none yet (as
// Reshape does) instead of copying it.
func passGradOn(in, out *Tensor, g []float32) {
	if in.node != nil && in.passGrad == nil && len(g) > 0 && len(out.passGrad) > 0 && &out.passGrad[0] == &g[0] {
		in.passGrad, out.passGrad = g, nil
		return
	}
	if gi, fresh := in.gradDst(); fresh {
		copy(gi, g)
	} else {
		kernels.Add(gi, g)
	}
}
