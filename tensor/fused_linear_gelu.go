package tensor

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/kernels"
)

// linearGELUMinRows is the number of rows per goroutine below which the
// fused backward pass of LinearGELU stays on one goroutine.
const linearGELUMinRows = 64

// LinearGELU returns GELU(x·wᵀ + b) with the exact (erf) GELU, the same
// numbers as GELU(Linear(x, w, b)) computed as one op: the GELU is taken
// in place over the product (the pre-activation is never a tensor of its
// own), and backward multiplies the upstream gradient by GELU' and sums
// it into the bias gradient in one pass over the rows before the two
// GEMMs of Linear. Under bf16 autocast the GEMMs run on the native bf16
// kernel as Linear's do; emulated, it is GELU(Linear(x, w, b)). Shapes
// are as Linear's; a mismatch panics naming them.
func LinearGELU(x, w, b *Tensor) *Tensor {
	if w.Dim() != 2 || x.Dim() == 0 || x.shape[x.Dim()-1] != w.shape[1] {
		panic(fmt.Sprintf("tensor: LinearGELU: input %v does not match weight %v ([out, in])", x.shape, w.shape))
	}
	if b != nil && (b.Dim() != 1 || b.shape[0] != w.shape[0]) {
		panic(fmt.Sprintf("tensor: LinearGELU: bias %v does not match weight %v", b.shape, w.shape))
	}
	cast := newBF16Cast()
	if cast != nil && !cast.native {
		// Emulated bf16 rounds copies of the operands: Linear keeps them.
		return GELU(Linear(x, w, b))
	}
	// Sgemm, or under native bf16 the kernel that rounds the operands
	// as it packs them.
	gemm := cast.gemm()
	in, outF := w.shape[1], w.shape[0]
	rows := numel(x.shape[:x.Dim()-1])
	shape := append(append([]int(nil), x.shape[:x.Dim()-1]...), outF)
	n := rows * outF
	out := &Tensor{data: getBuf(n), shape: shape}
	var bias []float32 // under bf16: added to each row in the GELU pass
	switch {
	case b == nil || outF == 0 || rows == 0:
		gemm(false, true, rows, outF, in, 1, x.data, in, w.data, in, 0, out.data, outF)
	case cast == nil: // the bias goes into each output tile just before the product
		kernels.SgemmBias(false, true, rows, outF, in, 1, x.data, in, w.data, in, b.data, out.data, outF)
	default: // bf16: the product, the bias added in the GELU pass below
		gemm(false, true, rows, outF, in, 1, x.data, in, w.data, in, 0, out.data, outF)
		bias = b.data
	}
	track := GradEnabled() && (x.requiresGrad || x.released || w.requiresGrad || w.released ||
		(b != nil && (b.requiresGrad || b.released)))
	var deriv []float32
	if track {
		deriv = getBuf(n)
	}
	// GELU in place over the product: each element is read before it is
	// written, so out may be both the input and the output.
	parallelFor((n+geluChunk-1)/geluChunk, elemMinItems/8/geluChunk, func(_, lo, hi int) {
		var scratch [geluChunk]float32
		for c := lo; c < hi; c++ {
			a, e := c*geluChunk, min((c+1)*geluChunk, n)
			dc := scratch[:e-a]
			if deriv != nil {
				dc = deriv[a:e]
			}
			if bias != nil {
				addBias(out.data[a:e], bias, a%outF)
			}
			kernels.GELU(out.data[a:e], dc, out.data[a:e])
		}
	})
	if !track {
		return out
	}
	inputs := []*Tensor{x, w}
	if b != nil {
		inputs = append(inputs, b)
	}
	return record(out, "linear_gelu", func(g []float32) {
		defer func() { putBuf(deriv); deriv = nil }()
		// g is out's pass-local buffer, which nothing reads after this
		// op: the product g·GELU' goes over it.
		gh := g
		var gb []float32
		if b.needsGrad() {
			gb = b.accGrad()
		}
		// One pass: multiply each row by GELU' and add it to a worker's
		// bias-gradient partial sum while the row is in cache.
		threads := max(1, kernels.NumThreads())
		parts := make([][]float32, threads)
		used := parallelFor(rows, linearGELUMinRows, func(wk, lo, hi int) {
			var part []float32
			if gb != nil {
				part = make([]float32, outF)
				parts[wk] = part
			}
			kernels.GELUGradBias(gh[lo*outF:hi*outF], deriv[lo*outF:hi*outF], part, hi-lo)
		})
		if gb != nil {
			for wk := range used {
				addTo(gb, parts[wk])
			}
		}
		// Linear's backward GEMMs, on the operands as they are now (as
		// Linear reads them; sharded data parallelism may swap storage
		// between forward and backward).
		if x.needsGrad() {
			gx, fresh := x.gradDst()
			beta := float32(1)
			if fresh {
				beta = 0
			}
			gemm(false, false, rows, in, outF, 1, gh, outF, w.data, in, beta, gx, in)
		}
		if w.needsGrad() {
			gw, fresh := w.gradDst()
			beta := float32(1)
			if fresh {
				beta = 0
			}
			gemm(true, false, outF, in, rows, 1, gh, outF, x.data, in, beta, gw, in)
		}
	}, inputs...)
}
