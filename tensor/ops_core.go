package tensor

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/kernels"
)

// Reshape returns a view of t with a new shape sharing t's data; one
// dimension may be -1 and is inferred.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	shape = append([]int(nil), shape...)
	infer := -1
	known := 1
	for i, d := range shape {
		if d == -1 {
			if infer >= 0 {
				panic(fmt.Sprintf("tensor: Reshape %v: more than one -1", shape))
			}
			infer = i
			continue
		}
		known *= d
	}
	if infer >= 0 {
		if known == 0 || len(t.data)%known != 0 {
			panic(fmt.Sprintf("tensor: Reshape %v -> %v: sizes do not divide", t.shape, shape))
		}
		shape[infer] = len(t.data) / known
	}
	if numel(shape) != len(t.data) {
		panic(fmt.Sprintf("tensor: Reshape %v -> %v: element counts differ", t.shape, shape))
	}
	out := &Tensor{data: t.data, shape: shape}
	return record(out, "reshape", func(g []float32) {
		if t.node != nil && t.passGrad == nil && len(g) > 0 && len(out.passGrad) > 0 && &out.passGrad[0] == &g[0] {
			// t's gradient is g itself: hand the pass-local buffer on
			// instead of copying it (Backward does not recycle it with
			// out's).
			t.passGrad, out.passGrad = g, nil
			return
		}
		if gt, fresh := t.gradDst(); fresh {
			copy(gt, g)
		} else {
			kernels.Add(gt, g)
		}
	}, t)
}

// MatMul returns op(a)·op(b) for 2-d a and b, where op transposes when
// transA/transB are set: MatMul(x, w, false, true) is x·wᵀ, a Linear layer.
func MatMul(a, b *Tensor, transA, transB bool) *Tensor {
	if a.Dim() != 2 || b.Dim() != 2 {
		panic(fmt.Sprintf("tensor: MatMul needs 2-d operands, got %v and %v", a.shape, b.shape))
	}
	m, k := a.shape[0], a.shape[1]
	if transA {
		m, k = k, m
	}
	k2, n := b.shape[0], b.shape[1]
	if transB {
		k2, n = n, k2
	}
	if k != k2 {
		panic(fmt.Sprintf("tensor: MatMul shape mismatch %v (trans=%v) · %v (trans=%v)", a.shape, transA, b.shape, transB))
	}
	out := Zeros(m, n)
	cast := newBF16Cast() // rounded operands under bf16 autocast
	ad, bd := cast.of(a.data), cast.of(b.data)
	kernels.Sgemm(transA, transB, m, n, k, 1, ad, a.shape[1], bd, b.shape[1], 0, out.data, n)
	y := record(out, "matmul", func(g []float32) {
		defer cast.release()
		if cast == nil {
			ad, bd = a.data, b.data
		}
		g = cast.of(g)
		if a.needsGrad() {
			ga := a.accGrad()
			if !transA { // dA[m,k] += g[m,n]·op(B)ᵀ
				kernels.Sgemm(false, !transB, m, k, n, 1, g, n, bd, b.shape[1], 1, ga, k)
			} else { // A is [k,m]: dA += op(B)·gᵀ
				kernels.Sgemm(transB, true, k, m, n, 1, bd, b.shape[1], g, n, 1, ga, m)
			}
		}
		if b.needsGrad() {
			gb := b.accGrad()
			if !transB { // dB[k,n] += op(A)ᵀ·g
				kernels.Sgemm(!transA, false, k, n, m, 1, ad, a.shape[1], g, n, 1, gb, n)
			} else { // B is [n,k]: dB += gᵀ·op(A)
				kernels.Sgemm(true, transA, n, k, m, 1, g, n, ad, a.shape[1], 1, gb, k)
			}
		}
	}, a, b)
	if y.node == nil { // no backward will release them
		cast.release()
	}
	return y
}
