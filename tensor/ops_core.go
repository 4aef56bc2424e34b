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

// MatMul returns op(a)·op(b), where op transposes the last two dimensions
// when transA/transB are set: MatMul(x, w, false, true) is x·wᵀ, a Linear
// layer. Operands of more than two dimensions are batches of matrices
// ([..., m, k] and [..., k, n]) whose leading dimensions broadcast as in
// torch.matmul; the result is [broadcast..., m, n]. Each operand needs at
// least two dimensions.
func MatMul(a, b *Tensor, transA, transB bool) *Tensor {
	if a.Dim() < 2 || b.Dim() < 2 {
		panic(fmt.Sprintf("tensor: MatMul needs operands of at least 2 dims, got %v and %v", a.shape, b.shape))
	}
	if a.Dim() != 2 || b.Dim() != 2 {
		return batchedMatMul(a, b, transA, transB)
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
	gemm := cast.gemm()
	gemm(transA, transB, m, n, k, 1, ad, a.shape[1], bd, b.shape[1], 0, out.data, n)
	y := record(out, "matmul", func(g []float32) {
		defer cast.release()
		if cast == nil {
			ad, bd = a.data, b.data
		}
		g = cast.of(g)
		if a.needsGrad() {
			ga := a.accGrad()
			if !transA { // dA[m,k] += g[m,n]·op(B)ᵀ
				gemm(false, !transB, m, k, n, 1, g, n, bd, b.shape[1], 1, ga, k)
			} else { // A is [k,m]: dA += op(B)·gᵀ
				gemm(transB, true, k, m, n, 1, bd, b.shape[1], g, n, 1, ga, m)
			}
		}
		if b.needsGrad() {
			gb := b.accGrad()
			if !transB { // dB[k,n] += op(A)ᵀ·g
				gemm(!transA, false, k, n, m, 1, ad, a.shape[1], g, n, 1, gb, n)
			} else { // B is [n,k]: dB += gᵀ·op(A)
				gemm(true, transA, n, k, m, 1, g, n, ad, a.shape[1], 1, gb, k)
			}
		}
	}, a, b)
	if y.node == nil { // no backward will release them
		cast.release()
	}
	return y
}

// batchedMatMul is MatMul over broadcast leading dimensions: one GEMM per
// matrix of the result, spread over goroutines when there are many small
// ones.
func batchedMatMul(a, b *Tensor, transA, transB bool) *Tensor {
	ra, ca := a.shape[a.Dim()-2], a.shape[a.Dim()-1]
	rb, cb := b.shape[b.Dim()-2], b.shape[b.Dim()-1]
	m, k := ra, ca
	if transA {
		m, k = k, m
	}
	k2, n := rb, cb
	if transB {
		k2, n = n, k2
	}
	if k != k2 {
		panic(fmt.Sprintf("tensor: MatMul shape mismatch %v (trans=%v) · %v (trans=%v)", a.shape, transA, b.shape, transB))
	}
	batchA, batchB := a.shape[:a.Dim()-2], b.shape[:b.Dim()-2]
	batch := broadcastShapes("MatMul", batchA, batchB)
	nb := numel(batch)
	// offA[i], offB[i]: where matrix i of the result reads each operand.
	offA, offB := make([]int, nb), make([]int, nb)
	sa, sb := broadcastStrides(batchA, batch), broadcastStrides(batchB, batch)
	idx := make([]int, len(batch))
	for i := range nb {
		oa, ob := 0, 0
		for d := range batch {
			oa += idx[d] * sa[d]
			ob += idx[d] * sb[d]
		}
		offA[i], offB[i] = oa*ra*ca, ob*rb*cb
		for d := len(batch) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < batch[d] {
				break
			}
			idx[d] = 0
		}
	}
	shape := append(append([]int(nil), batch...), m, n)
	out := Zeros(shape...)
	cast := newBF16Cast() // rounded operands under bf16 autocast
	ad, bd := cast.of(a.data), cast.of(b.data)
	mats := func(fn func(i int, gemm gemmFunc)) {
		// Many small products: one per goroutine; few large ones: each
		// spread by the GEMM itself.
		if nb >= kernels.NumThreads() && m*n*k < 1<<21 {
			parallelFor(nb, 1, func(_, lo, hi int) {
				for i := lo; i < hi; i++ {
					fn(i, cast.gemmSerial())
				}
			})
			return
		}
		for i := range nb {
			fn(i, cast.gemm())
		}
	}
	mats(func(i int, gemm gemmFunc) {
		gemm(transA, transB, m, n, k, 1, ad[offA[i]:], ca, bd[offB[i]:], cb, 0, out.data[i*m*n:], n)
	})
	// An operand broadcast over the batch gets several products added into
	// one gradient matrix: those must not run concurrently.
	broadcastA, broadcastB := numel(batchA) != nb, numel(batchB) != nb
	y := record(out, "matmul", func(g []float32) {
		defer cast.release()
		if cast == nil {
			ad, bd = a.data, b.data
		}
		g = cast.of(g)
		if a.needsGrad() {
			ga := a.accGrad()
			gradA := func(i int, gemm gemmFunc) {
				gi, bi := g[i*m*n:], bd[offB[i]:]
				if !transA {
					gemm(false, !transB, m, k, n, 1, gi, n, bi, cb, 1, ga[offA[i]:], k)
				} else {
					gemm(transB, true, k, m, n, 1, bi, cb, gi, n, 1, ga[offA[i]:], m)
				}
			}
			if broadcastA {
				for i := range nb {
					gradA(i, cast.gemm())
				}
			} else {
				mats(gradA)
			}
		}
		if b.needsGrad() {
			gb := b.accGrad()
			gradB := func(i int, gemm gemmFunc) {
				gi, ai := g[i*m*n:], ad[offA[i]:]
				if !transB {
					gemm(!transA, false, k, n, m, 1, ai, ca, gi, n, 1, gb[offB[i]:], n)
				} else {
					gemm(true, transA, n, k, m, 1, gi, n, ai, ca, 1, gb[offB[i]:], k)
				}
			}
			if broadcastB {
				for i := range nb {
					gradB(i, cast.gemm())
				}
			} else {
				mats(gradB)
			}
		}
	}, a, b)
	if y.node == nil { // no backward will release them
		cast.release()
	}
	return y
}
