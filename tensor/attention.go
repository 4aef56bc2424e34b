package tensor

import (
	"fmt"
	"math"
	"sync"

	"github.com/gotrain/gotrain/internal/kernels"
)

// Attention tile sizes: a worker holds one attnBr×attnBc block of scores
// (and one of their gradients) at a time, whatever T is. Queries are
// taken attnBr rows at a time (attnBrCausal with the causal mask) and
// keys attnBc at a time (attnBcCausal with the mask), so each product is
// a GEMM large enough for the micro-kernels. Under the causal mask a
// block's products stop at the last key its last query row sees, so the
// work above the diagonal is the triangle of one row block, whatever the
// key block: with 32-row blocks and whole 128-key blocks a T = 128 head
// takes four products of 32×32 to 32×128 scores, 10/16 of the full
// square (the causal half is about 8/16), where 64×64 blocks took 12/16.
const (
	attnBr       = 64
	attnBrCausal = 32
	attnBc       = 128
	attnBcCausal = 128
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
// the scores block by block. Where every key fits in one block (Tk ≤
// 128, without dropout) forward keeps the probabilities instead and
// backward reads them (see keepsProbs). Blocks wholly above the causal
// diagonal are skipped. Heads spread over kernels.NumThreads goroutines. It panics,
// naming both shapes, when the operands do not fit together.
func ScaledDotProductAttention(q, k, v *Tensor, causal bool) *Tensor {
	if y, ok := attentionAutocast(q, k, v, causal); ok { // bf16 operands under Autocast
		return y
	}
	a := newAttnGeom("ScaledDotProductAttention", q, k, v, causal)
	a.useCastGemm()
	out := &Tensor{data: getBuf(len(q.data)), shape: append([]int(nil), q.shape...)}
	return a.run(out, q, k, v)
}

// SelfAttentionQKV is ScaledDotProductAttention over the heads of a fused
// query-key-value projection, laid out as a Linear to 3·C produces it
// (nanoGPT's c_attn): qkv is [B, T, 3·C], queries in columns 0..C, keys
// in C..2C and values in 2C..3C, each split into heads of C/heads
// columns. The result is [B, T, C] with the heads side by side, the
// layout of nanoGPT's y.transpose(1, 2).view(B, T, C). It equals
// splitting qkv into [B, H, T, Dh] heads with Permute, attending and
// merging the heads back with Permute, but reads the heads in place with
// row strides and writes the output and the gradient in place: no copy is
// made in either direction. It panics, naming the shape, when qkv is not
// [B, T, 3·C] with C a multiple of heads.
func SelfAttentionQKV(qkv *Tensor, heads int, causal bool) *Tensor {
	s := qkv.shape
	if len(s) != 3 || heads <= 0 || s[2]%(3*heads) != 0 {
		panic(fmt.Sprintf("tensor: SelfAttentionQKV: qkv %v is not [B, T, 3·C] with C a multiple of %d heads", s, heads))
	}
	if y, ok := selfAttentionAutocast(qkv, heads, causal); ok { // bf16 operands under Autocast
		return y
	}
	return selfAttentionQKV(qkv, heads, causal, nil)
}

// run computes the attention into out and records its backward pass; in
// the packed layout q, k and v are the one qkv tensor.
func (a attnGeom) run(out, q, k, v *Tensor) *Tensor {
	lse := make([]float32, a.heads*a.tq)
	var probs []float32 // every head's probabilities, when kept for backward
	if a.keepsProbs() && GradEnabled() && (q.needsGrad() || k.needsGrad() || v.needsGrad()) {
		probs = getBuf(a.probsLen())
	}
	bufs := workerBufs(a.heads, 1, attnBr*attnBc)
	parallelFor(a.heads, 1, func(w, lo, hi int) {
		st := make([]float32, 2*attnBr)
		kp := getPanels()
		defer putPanels(kp)
		a.eachHead(lo, hi, probs, nil, func(h int) {
			a.forwardHead(h, q.data, k.data, v.data, out.data, lse, bufs[w], st, kp, probs)
		})
	})
	putBufs(bufs)
	backward := func(g []float32) {
		if probs != nil {
			defer putBuf(probs)
		}
		var dq, dk, dv []float32
		fresh := false // packed: dqkv not yet holding anything
		if a.packed {
			dq, fresh = q.gradDst()
			dk, dv = dq, dq
		} else {
			if q.needsGrad() {
				dq = q.accGrad()
			}
			if k.needsGrad() {
				dk = k.accGrad()
			}
			if v.needsGrad() {
				dv = v.accGrad()
			}
		}
		blocks := 2
		if a.drop != nil {
			blocks = 3 // and the dropped probabilities
		}
		bufs := workerBufs(a.heads, 1, blocks*attnBr*attnBc)
		parallelFor(a.heads, 1, func(w, lo, hi int) {
			d := make([]float32, a.tq)
			kp, vp := getPanels(), getPanels()
			defer putPanels(kp)
			defer putPanels(vp)
			a.eachHead(lo, hi, probs, out.data, func(h int) {
				a.backwardHead(h, q.data, k.data, v.data, out.data, g, lse, dq, dk, dv, bufs[w], d, fresh, kp, vp, probs)
			})
		})
		putBufs(bufs)
	}
	if a.packed {
		return record(out, "self_attention_qkv", backward, q)
	}
	return record(out, "scaled_dot_product_attention", backward, q, k, v)
}

// attnGeom is the shape and memory layout of one attention call. Row t of
// head h's queries starts at qOff(h) + t·ldq (keys and values alike, with
// ldkv; the output and its gradient with ldo); gradients share the layout
// of what they are gradients of.
type attnGeom struct {
	heads, tq, tk, dh int
	nh                int // heads per batch element (packed layout)
	br                int // queries per block (at most attnBr)
	bc                int // keys per block
	scale             float32
	causal            bool
	// packed: q, k and v are column blocks of one [B, T, 3·C] tensor and
	// the output is [B, T, C]; otherwise each is [B, H, T, Dh].
	packed         bool
	ldq, ldkv, ldo int
	// gemm runs the block products: kernels.SgemmSerial, or under native
	// bf16 autocast kernels.SgemmBF16Serial (see attentionAutocast).
	gemm gemmFunc
	// packKV: gemm is the float32 one, and the products with Kᵀ and Vᵀ
	// run on a head's keys and values packed once (kernels.PackedB)
	// rather than packed again by every block's call (see useCastGemm).
	packKV bool
	// drop, if not nil, drops attention probabilities (see
	// attention_dropout.go).
	drop *attnDropout
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
	a := attnGeom{heads: qs[0] * qs[1], nh: qs[1], tq: qs[2], tk: ks[2], dh: qs[3], causal: causal, gemm: kernels.SgemmSerial}
	a.ldq, a.ldkv, a.ldo = a.dh, a.dh, a.dh
	a.setBlocks()
	a.scale = float32(1 / math.Sqrt(float64(max(a.dh, 1))))
	return a
}

// useCastGemm sets the block products' GEMM for the current autocast:
// the native bf16 kernel, which rounds its operands as it packs them and
// so packs every block itself, or the float32 one, which runs on each
// head's keys and values packed once (packKV).
func (a *attnGeom) useCastGemm() {
	c := newBF16Cast()
	a.gemm = c.gemmSerial()
	a.packKV = c == nil || !c.native
}

// setBlocks sets the block sizes for the mask.
func (a *attnGeom) setBlocks() {
	a.br, a.bc = attnBr, attnBc
	if a.causal {
		a.br, a.bc = attnBrCausal, attnBcCausal
	}
}

// qOff, kOff, vOff and oOff return where head h's first row of queries,
// keys, values and output starts.
func (a attnGeom) qOff(h int) int {
	if a.packed {
		return h/a.nh*a.tq*a.ldq + h%a.nh*a.dh
	}
	return h * a.tq * a.dh
}

func (a attnGeom) kOff(h int) int {
	if a.packed {
		return a.qOff(h) + a.ldo
	}
	return h * a.tk * a.dh
}

func (a attnGeom) vOff(h int) int {
	if a.packed {
		return a.qOff(h) + 2*a.ldo
	}
	return h * a.tk * a.dh
}

func (a attnGeom) oOff(h int) int {
	if a.packed {
		return h/a.nh*a.tq*a.ldo + h%a.nh*a.dh
	}
	return h * a.tq * a.dh
}

// keysFor returns how many keys (from 0) query row i may see.
func (a attnGeom) keysFor(i int) int {
	if a.causal {
		return min(i+1, a.tk)
	}
	return a.tk
}

// keepsProbs reports whether the forward pass keeps the attention
// probabilities for backward instead of backward recomputing them: when
// every key fits in one key block (Tk ≤ attnBc), so each row's softmax is
// final after one block, and without dropout. Backward then skips the
// product Q·Kᵀ and its exponentials, a fifth of its products, at the cost
// of probsLen floats held from forward to backward: Tk/(3·Dh) times the
// fused qkv activation at most (4/3 for heads of 32 at T = 128). Longer
// sequences recompute them block by block, as FlashAttention does, so
// their memory stays linear in T.
func (a attnGeom) keepsProbs() bool { return a.tk <= a.bc && a.drop == nil }

// probsLen is the length of the kept probabilities: for each head, tq
// rows of a.bc floats, laid out as the score blocks are.
func (a attnGeom) probsLen() int { return a.heads * a.tq * a.bc }

// probsAt returns head h's kept probabilities from query row i.
func (a attnGeom) probsAt(probs []float32, h, i int) []float32 {
	return probs[(h*a.tq+i)*a.bc:]
}

// eachHead runs f on heads lo..hi in turn, asking for each next head's
// data (see prefetchHead) while the one before it runs.
func (a attnGeom) eachHead(lo, hi int, probs, o []float32, f func(h int)) {
	a.prefetchHead(probs, o, lo)
	for h := lo; h < hi; h++ {
		if h+1 < hi {
			a.prefetchHead(probs, o, h+1)
		}
		f(h)
	}
}

// prefetchHead asks for what head h's pass reads first from memory to
// be brought into cache while the head before it runs: the part of its
// kept probabilities its row blocks use (written long before, or to be
// overwritten, and read transposed by the block products, an order the
// hardware does not prefetch), and in backward (o not nil) its output
// rows, written in forward, which Σ dO·O reads a few floats at a time.
func (a attnGeom) prefetchHead(probs, o []float32, h int) {
	if probs != nil {
		for i0 := 0; i0 < a.tq; i0 += a.br {
			br := min(a.br, a.tq-i0)
			width := min(a.bc, a.keysFor(i0+br-1))
			for r := range br {
				kernels.Prefetch(a.probsAt(probs, h, i0+r)[:width])
			}
		}
	}
	if o != nil {
		oh := o[a.oOff(h):]
		for i := range a.tq {
			kernels.Prefetch(oh[i*a.ldo : i*a.ldo+a.dh])
		}
	}
}

// forwardHead computes one head's output rows and their log-sum-exp. s is
// the score block, st holds the running max and sum of each row. With
// probs (see keepsProbs) each row block's scores are taken in place there
// and left as the normalised probabilities P, and the output is P·V.
func (a attnGeom) forwardHead(h int, q, k, v, o, lse, s, st []float32, kp *kernels.PackedB, probs []float32) {
	dh, ldq, ldkv, ldo := a.dh, a.ldq, a.ldkv, a.ldo
	qh, kh, vh, oh := q[a.qOff(h):], k[a.kOff(h):], v[a.vOff(h):], o[a.oOff(h):]
	kp = a.packNT(kp, kh)
	lh := lse[h*a.tq : (h+1)*a.tq]
	mrow, lrow := st[:attnBr], st[attnBr:]
	// With every key in one block each row's softmax is final after it,
	// so P is normalised before P·V (whether kept or not, so that the
	// output does not depend on it); otherwise the output is rescaled.
	oneBlock := a.tk <= a.bc
	for i0 := 0; i0 < a.tq; i0 += a.br {
		br := min(a.br, a.tq-i0)
		oi := oh[i0*ldo:]
		for r := range br {
			mrow[r] = float32(math.Inf(-1))
			lrow[r] = 0
		}
		jEnd := a.keysFor(i0 + br - 1)
		if probs != nil {
			s = a.probsAt(probs, h, i0)
		}
		for j0 := 0; j0 < jEnd; j0 += a.bc {
			bc := min(a.bc, jEnd-j0)
			a.productNT(br, bc, j0, a.scale, qh[i0*ldq:], ldq, kh, kp, s)
			for r := range br {
				row := s[r*a.bc : r*a.bc+bc]
				lim := min(bc, max(a.keysFor(i0+r)-j0, 0))
				if lim == 0 {
					clear(row)
					continue
				}
				lim8 := padMasked(row, lim)
				mx := max(mrow[r], kernels.MaxOf(row[:lim8]))
				sum := kernels.ExpShiftSum(row[:lim8], row[:lim8], mx)
				clear(row[lim8:])
				// Rescale what earlier blocks summed (nothing yet in the
				// first block, where the running max is −Inf).
				if mrow[r] != mx && !math.IsInf(float64(mrow[r]), -1) {
					alpha := kernels.Exp32(mrow[r] - mx)
					lrow[r] *= alpha
					kernels.Scale(alpha, oi[r*ldo:r*ldo+dh])
				}
				lrow[r] += sum
				mrow[r] = mx
				if oneBlock { // the row's softmax is final: P itself
					kernels.Scale(1/sum, row[:lim8])
				}
				if a.drop != nil { // after the sum: dropout follows the softmax
					a.drop.apply(row[:lim], a.dropIndex(h, i0+r, j0))
				}
			}
			// The first key block writes the output rows (every row sees
			// key 0; a row without keys in a block has P = 0 there), the
			// others add to them.
			beta := float32(1)
			if j0 == 0 {
				beta = 0
			}
			a.gemm(false, false, br, dh, bc, 1, s, a.bc, vh[j0*ldkv:], ldkv, beta, oi, ldo)
		}
		for r := range br {
			or := oi[r*ldo : r*ldo+dh]
			if lrow[r] == 0 { // no key visible (Tk = 0): PyTorch gives NaN
				lh[i0+r] = float32(math.Inf(1))
				for c := range or {
					or[c] = float32(math.NaN())
				}
				continue
			}
			if !oneBlock { // P·V was taken with P unnormalised
				kernels.Scale(1/lrow[r], or)
			}
			lh[i0+r] = mrow[r] + float32(math.Log(float64(lrow[r])))
		}
	}
}

// backwardHead accumulates one head's gradients into dq, dk and dv (each
// nil when not wanted). s holds a score block and its gradient, d the
// rows' Σ dO·O. With fresh (the packed layout's fresh gradient buffer,
// whose contents are unspecified) each block of rows is written, not
// added to, the first time: every query block sees key block 0, and the
// first query block taken for a key block sees all of its keys (the last
// one under the causal mask, since Tq = Tk there).
//
// kp and vp hold the head's keys and values packed for the products with
// their transposes (see packNT). With probs, the probabilities kept by
// forwardHead, P is read there instead of recomputed.
func (a attnGeom) backwardHead(h int, q, k, v, o, g, lse, dq, dk, dv, s, d []float32, fresh bool, kp, vp *kernels.PackedB, probs []float32) {
	dh, ldq, ldkv, ldo := a.dh, a.ldq, a.ldkv, a.ldo
	at := func(x []float32, off int) []float32 {
		if x == nil {
			return nil
		}
		return x[off:]
	}
	qh, kh, vh, oh, gh := q[a.qOff(h):], k[a.kOff(h):], v[a.vOff(h):], o[a.oOff(h):], g[a.oOff(h):]
	dqh, dkh, dvh := at(dq, a.qOff(h)), at(dk, a.kOff(h)), at(dv, a.vOff(h))
	lh := lse[h*a.tq : (h+1)*a.tq]
	if probs == nil { // Q·Kᵀ is recomputed
		kp = a.packNT(kp, kh)
	}
	if dqh == nil && dkh == nil { // no dP = dO·Vᵀ to compute
		vp = nil
	} else {
		vp = a.packNT(vp, vh)
	}
	for i := range a.tq {
		d[i] = kernels.Dot(gh[i*ldo:i*ldo+dh], oh[i*ldo:])
	}
	p, dp := s[:attnBr*a.bc], s[attnBr*a.bc:2*attnBr*a.bc]
	pd := p // the probabilities P·V used: P, or with dropout P∘M/(1−p)
	if a.drop != nil {
		pd = s[2*attnBr*a.bc:]
	}
	for j0 := 0; j0 < a.tk; j0 += a.bc {
		first := 0
		if a.causal { // the first query block that sees key j0
			first = j0 / a.br * a.br
		}
		nq := (a.tq - first + a.br - 1) / a.br
		for q := range nq {
			// Under the causal mask the query blocks go from the last to
			// the first: the last sees every key of the block, so in a
			// fresh buffer it is the one that writes dK_j and dV_j whole.
			i0 := first + q*a.br
			if a.causal {
				i0 = first + (nq-1-q)*a.br
			}
			br := min(a.br, a.tq-i0)
			// Keys of this block the block's last query row sees: the
			// products stop there (all of the block without the mask).
			bc := min(a.bc, a.tk-j0, max(a.keysFor(i0+br-1)-j0, 0))
			if bc == 0 {
				continue
			}
			betaQ, betaKV := float32(1), float32(1)
			if fresh && j0 == 0 {
				betaQ = 0
			}
			if fresh && q == 0 {
				betaKV = 0
			}
			if probs != nil {
				p = a.probsAt(probs, h, i0)
				pd = p
			} else {
				a.recomputeProbs(h, i0, br, j0, bc, qh, kh, kp, lh, p, pd)
			}
			// dP = dO_i·V_jᵀ, then dS = P∘(dP − D); the products below
			// apply the scale. dS is taken before dV, so that P, read
			// row by row, is in cache for dV's transposed reads (kept
			// from forward, it comes from memory).
			if dqh != nil || dkh != nil {
				a.productNT(br, bc, j0, 1, gh[i0*ldo:], ldo, vh, vp, dp)
				for r := range br {
					if a.drop != nil { // through the dropout: dP = dPd∘M/(1−p)
						a.drop.apply(dp[r*a.bc:r*a.bc+bc], a.dropIndex(h, i0+r, j0))
					}
					kernels.SubMul(dp[r*a.bc:r*a.bc+bc], p[r*a.bc:], d[i0+r])
				}
			}
			if dvh != nil { // dV_j += Pᵀ·dO_i (the dropped P)
				a.gemm(true, false, bc, dh, br, 1, pd, a.bc, gh[i0*ldo:], ldo, betaKV, dvh[j0*ldkv:], ldkv)
			}
			if dqh != nil { // dQ_i += scale·dS·K_j
				a.gemm(false, false, br, dh, bc, a.scale, dp, a.bc, kh[j0*ldkv:], ldkv, betaQ, dqh[i0*ldq:], ldq)
			}
			if dkh != nil { // dK_j += scale·dSᵀ·Q_i
				a.gemm(true, false, bc, dh, br, a.scale, dp, a.bc, qh[i0*ldq:], ldq, betaKV, dkh[j0*ldkv:], ldkv)
			}
		}
	}
}

// recomputeProbs recomputes P = e^(S − lse) into p for query rows
// i0..i0+br and keys j0..j0+bc of head h (the dropped P∘M/(1−p) into pd
// too, under dropout), from the scores' product Q·Kᵀ with kp's packed
// keys.
func (a attnGeom) recomputeProbs(h, i0, br, j0, bc int, qh, kh []float32, kp *kernels.PackedB, lh, p, pd []float32) {
	a.productNT(br, bc, j0, a.scale, qh[i0*a.ldq:], a.ldq, kh, kp, p)
	for r := range br {
		row := p[r*a.bc : r*a.bc+bc]
		lim8 := padMasked(row, min(bc, max(a.keysFor(i0+r)-j0, 0)))
		kernels.ExpShiftSum(row[:lim8], row[:lim8], lh[i0+r]) // P = e^(S − lse)
		clear(row[lim8:])
		if a.drop != nil {
			copy(pd[r*a.bc:r*a.bc+bc], row)
			a.drop.apply(pd[r*a.bc:r*a.bc+bc], a.dropIndex(h, i0+r, j0))
		}
	}
}

// packNT packs the transpose of the keys (or values) y that some query
// sees into p and returns it, or returns nil when the block products do
// not run on packed panels.
func (a attnGeom) packNT(p *kernels.PackedB, y []float32) *kernels.PackedB {
	if !a.packKV {
		return nil
	}
	keys := 0
	if a.tq > 0 {
		keys = a.keysFor(a.tq - 1)
	}
	p.Pack(true, a.dh, keys, y, a.ldkv)
	return p
}

// productNT computes the score block c = alpha·X·Yᵀ (row stride a.bc) of
// br rows of x, row stride ldx, and keys j0..j0+bc of y (keys or values),
// from yp's packed panels when it is not nil.
func (a attnGeom) productNT(br, bc, j0 int, alpha float32, x []float32, ldx int, y []float32, yp *kernels.PackedB, c []float32) {
	if yp != nil {
		kernels.SgemmPackedB(false, br, bc, a.dh, alpha, x, ldx, yp, j0, 0, c, a.bc)
		return
	}
	a.gemm(false, true, br, bc, a.dh, alpha, x, ldx, y[j0*a.ldkv:], a.ldkv, 0, c, a.bc)
}

// panels recycles the workers' packed keys and values between calls.
var panels = sync.Pool{New: func() any { return new(kernels.PackedB) }}

func getPanels() *kernels.PackedB { return panels.Get().(*kernels.PackedB) }

// putPanels returns p to the pool without the operand it was packed from.
func putPanels(p *kernels.PackedB) {
	p.Reset()
	panels.Put(p)
}

// padMasked sets the masked scores of row from lim up to the next
// multiple of 8 (at most len(row)) to −Inf and returns that length, so
// that the row kernels take whole vectors: the padding's exponentials
// are 0 and do not change the row's maximum or sum.
func padMasked(row []float32, lim int) int {
	lim8 := min(len(row), (lim+7)&^7)
	if lim == 0 {
		return 0
	}
	for i := lim; i < lim8; i++ {
		row[i] = float32(math.Inf(-1))
	}
	return lim8
}
