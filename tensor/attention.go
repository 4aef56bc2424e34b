package tensor

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
)

// Attention tile sizes: a worker holds one attnBr×attnBc block of scores
// (and one of their gradients) at a time, whatever T is. Queries are
// taken attnBr rows at a time and keys attnBc at a time (attnBcCausal
// with the causal mask, where smaller blocks waste less work on the
// diagonal), so each product is a GEMM large enough for the
// micro-kernels.
const (
	attnBr       = 64
	attnBc       = 128
	attnBcCausal = 64
)

// ScaledDotProductAttention returns softmax(q·kᵀ/√Dh + mask)·v for q of
// shape [B, H, Tq, Dh] and k, v of shape [B, H, Tk, Dh], PyTorch's
// F.scaled_dot_product_attention without dropout. With causal, query i
// attends to keys 0..i only (PyTorch's is_causal, aligned at the top left).
//
// The forward and backward passes are fused and tiled as in
// FlashAttention: scores are computed a block at a time with an online
// softmax, never more than one attnBr×attnBc block per head, and only the
// log-sum-exp of each query row is kept for backward, which recomputes
// the scores block by block. Blocks wholly above the causal diagonal are
// skipped. Heads spread over kernels.NumThreads goroutines. It panics,
// naming both shapes, when the operands do not fit together.
func ScaledDotProductAttention(q, k, v *Tensor, causal bool) *Tensor {
	if y, ok := attentionAutocast(q, k, v, causal); ok { // bf16 operands under Autocast
		return y
	}
	a := newAttnGeom("ScaledDotProductAttention", q, k, v, causal)
	out := &Tensor{data: getBuf(len(q.data)), shape: append([]int(nil), q.shape...)}
	lse := make([]float32, a.heads*a.tq)
	parallelFor(a.heads, 1, func(_, lo, hi int) {
		s := getBuf(attnBr * attnBc)
		st := make([]float32, 2*attnBr)
		for h := lo; h < hi; h++ {
			a.forwardHead(h, q.data, k.data, v.data, out.data, lse, s, st)
		}
		putBuf(s)
	})
	return record(out, "scaled_dot_product_attention", func(g []float32) {
		var dq, dk, dv []float32
		if q.needsGrad() {
			dq = q.accGrad()
		}
		if k.needsGrad() {
			dk = k.accGrad()
		}
		if v.needsGrad() {
			dv = v.accGrad()
		}
		parallelFor(a.heads, 1, func(_, lo, hi int) {
			s := getBuf(2 * attnBr * attnBc)
			d := make([]float32, a.tq)
			for h := lo; h < hi; h++ {
				a.backwardHead(h, q.data, k.data, v.data, out.data, g, lse, dq, dk, dv, s, d)
			}
			putBuf(s)
		})
	}, q, k, v)
}

// attnGeom is the shape of one attention call.
type attnGeom struct {
	heads, tq, tk, dh int
	bc                int // keys per block
	scale             float32
	causal            bool
}

func newAttnGeom(op string, q, k, v *Tensor, causal bool) attnGeom {
	qs, ks, vs := q.shape, k.shape, v.shape
	if len(qs) != 4 || len(ks) != 4 || len(vs) != 4 {
		panic(fmt.Sprintf("tensor: %s: q %v, k %v and v %v must all be [B, H, T, Dh]", op, qs, ks, vs))
	}
	if qs[0] != ks[0] || qs[1] != ks[1] || qs[3] != ks[3] || !sameShape(ks, vs) {
		panic(fmt.Sprintf("tensor: %s: q %v, k %v and v %v do not fit: k and v must be [%d, %d, Tk, %d]",
			op, qs, ks, vs, qs[0], qs[1], qs[3]))
	}
	a := attnGeom{heads: qs[0] * qs[1], tq: qs[2], tk: ks[2], dh: qs[3], bc: attnBc, causal: causal}
	if causal {
		a.bc = attnBcCausal
	}
	a.scale = float32(1 / math.Sqrt(float64(max(a.dh, 1))))
	return a
}

// keysFor returns how many keys (from 0) query row i may see.
func (a attnGeom) keysFor(i int) int {
	if a.causal {
		return min(i+1, a.tk)
	}
	return a.tk
}

// forwardHead computes one head's output rows and their log-sum-exp. s is
// the score block, st holds the running max and sum of each row.
func (a attnGeom) forwardHead(h int, q, k, v, o, lse, s, st []float32) {
	dh := a.dh
	qh, kh, vh := q[h*a.tq*dh:(h+1)*a.tq*dh], k[h*a.tk*dh:(h+1)*a.tk*dh], v[h*a.tk*dh:(h+1)*a.tk*dh]
	oh := o[h*a.tq*dh : (h+1)*a.tq*dh]
	lh := lse[h*a.tq : (h+1)*a.tq]
	mrow, lrow := st[:attnBr], st[attnBr:]
	for i0 := 0; i0 < a.tq; i0 += attnBr {
		br := min(attnBr, a.tq-i0)
		oi := oh[i0*dh : (i0+br)*dh]
		clear(oi)
		for r := range br {
			mrow[r] = float32(math.Inf(-1))
			lrow[r] = 0
		}
		jEnd := a.keysFor(i0 + br - 1)
		for j0 := 0; j0 < jEnd; j0 += a.bc {
			bc := min(a.bc, jEnd-j0)
			kernels.SgemmSerial(false, true, br, bc, dh, a.scale, qh[i0*dh:], dh, kh[j0*dh:], dh, 0, s, a.bc)
			for r := range br {
				row := s[r*a.bc : r*a.bc+bc]
				lim := min(bc, max(a.keysFor(i0+r)-j0, 0))
				if lim == 0 {
					clear(row)
					continue
				}
				mx := max(mrow[r], rowMax(row[:lim]))
				kernels.Axpy(-mx, attnOnes[:lim], row) // row −= mx
				kernels.Exp(row[:lim], row[:lim])
				sum := kernels.Sum(row[:lim])
				clear(row[lim:])
				if alpha := kernels.Exp32(mrow[r] - mx); mrow[r] != mx {
					lrow[r] *= alpha
					kernels.Scale(alpha, oi[r*dh:(r+1)*dh])
				}
				lrow[r] += sum
				mrow[r] = mx
			}
			kernels.SgemmSerial(false, false, br, dh, bc, 1, s, a.bc, vh[j0*dh:], dh, 1, oi, dh)
		}
		for r := range br {
			if lrow[r] == 0 { // no key visible (Tk = 0): PyTorch gives NaN
				lh[i0+r] = float32(math.Inf(1))
				for c := range dh {
					oi[r*dh+c] = float32(math.NaN())
				}
				continue
			}
			kernels.Scale(1/lrow[r], oi[r*dh:(r+1)*dh])
			lh[i0+r] = mrow[r] + float32(math.Log(float64(lrow[r])))
		}
	}
}

// backwardHead accumulates one head's gradients into dq, dk and dv (each
// nil when not wanted). s holds a score block and its gradient, d the
// rows' Σ dO·O.
func (a attnGeom) backwardHead(h int, q, k, v, o, g, lse, dq, dk, dv, s, d []float32) {
	dh := a.dh
	span := func(x []float32, t int) []float32 {
		if x == nil {
			return nil
		}
		return x[h*t*dh : (h+1)*t*dh]
	}
	qh, kh, vh, oh, gh := span(q, a.tq), span(k, a.tk), span(v, a.tk), span(o, a.tq), span(g, a.tq)
	dqh, dkh, dvh := span(dq, a.tq), span(dk, a.tk), span(dv, a.tk)
	lh := lse[h*a.tq : (h+1)*a.tq]
	for i := range a.tq {
		var sum float32
		gi, oi := gh[i*dh:(i+1)*dh], oh[i*dh:(i+1)*dh]
		for c := range dh {
			sum += gi[c] * oi[c]
		}
		d[i] = sum
	}
	p, dp := s[:attnBr*a.bc], s[attnBr*a.bc:]
	for j0 := 0; j0 < a.tk; j0 += a.bc {
		bc := min(a.bc, a.tk-j0)
		i0 := 0
		if a.causal { // the first query block that sees key j0
			i0 = j0 / attnBr * attnBr
		}
		for ; i0 < a.tq; i0 += attnBr {
			br := min(attnBr, a.tq-i0)
			kernels.SgemmSerial(false, true, br, bc, dh, a.scale, qh[i0*dh:], dh, kh[j0*dh:], dh, 0, p, a.bc)
			for r := range br {
				row := p[r*a.bc : r*a.bc+bc]
				lim := min(bc, max(a.keysFor(i0+r)-j0, 0))
				kernels.Axpy(-lh[i0+r], attnOnes[:lim], row) // row −= lse
				kernels.Exp(row[:lim], row[:lim])
				clear(row[lim:])
			}
			if dvh != nil { // dV_j += Pᵀ·dO_i
				kernels.SgemmSerial(true, false, bc, dh, br, 1, p, a.bc, gh[i0*dh:], dh, 1, dvh[j0*dh:], dh)
			}
			if dqh == nil && dkh == nil {
				continue
			}
			// dP = dO_i·V_jᵀ, then dS = P∘(dP − D); the products below
			// apply the scale.
			kernels.SgemmSerial(false, true, br, bc, dh, 1, gh[i0*dh:], dh, vh[j0*dh:], dh, 0, dp, a.bc)
			for r := range br {
				pr, dr := p[r*a.bc:r*a.bc+bc], dp[r*a.bc:r*a.bc+bc]
				kernels.Axpy(-d[i0+r], attnOnes[:bc], dr)
				kernels.Mul(dr, pr)
			}
			if dqh != nil { // dQ_i += scale·dS·K_j
				kernels.SgemmSerial(false, false, br, dh, bc, a.scale, dp, a.bc, kh[j0*dh:], dh, 1, dqh[i0*dh:], dh)
			}
			if dkh != nil { // dK_j += scale·dSᵀ·Q_i
				kernels.SgemmSerial(true, false, bc, dh, br, a.scale, dp, a.bc, qh[i0*dh:], dh, 1, dkh[j0*dh:], dh)
			}
		}
	}
}

// attnOnes is a row of ones, for subtracting a constant from a row of
// scores with the vector Axpy.
var attnOnes = func() []float32 {
	o := make([]float32, max(attnBc, attnBcCausal))
	for i := range o {
		o[i] = 1
	}
	return o
}()

// rowMax returns the largest element of x (−Inf for none), with four
// independent comparisons in flight.
func rowMax(x []float32) float32 {
	m0, m1, m2, m3 := float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1))
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0, m1, m2, m3 = max(m0, x[i]), max(m1, x[i+1]), max(m2, x[i+2]), max(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = max(m0, x[i])
	}
	return max(max(m0, m1), max(m2, m3))
}
