package tensor

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/kernels"
)

// Linear returns x·wᵀ + b, PyTorch's linear layer: x is [..., in], w is
// [out, in] and b is [out] or nil; the result is [..., out]. It is one GEMM
// forward and up to two in backward (dx = g·w, dw = gᵀ·x) plus a row sum
// for db, each skipped when that input needs no gradient.
func Linear(x, w, b *Tensor) *Tensor {
	if w.Dim() != 2 || x.Dim() == 0 || x.shape[x.Dim()-1] != w.shape[1] {
		panic(fmt.Sprintf("tensor: Linear: input %v does not match weight %v ([out, in])", x.shape, w.shape))
	}
	if b != nil && (b.Dim() != 1 || b.shape[0] != w.shape[0]) {
		panic(fmt.Sprintf("tensor: Linear: bias %v does not match weight %v", b.shape, w.shape))
	}
	in, outF := w.shape[1], w.shape[0]
	rows := len(x.data) / max(in, 1)
	if in == 0 {
		rows = numel(x.shape[:x.Dim()-1])
	}
	shape := append(append([]int(nil), x.shape[:x.Dim()-1]...), outF)
	// The output may be a recycled buffer (see freeWithGraph): it is
	// written whole, by a GEMM that adds the bias to each tile or by one
	// with beta 0; neither reads what it held.
	out := &Tensor{data: getBuf(rows * outF), shape: shape}
	// Under bf16 autocast the GEMMs take rounded operands (see Autocast).
	cast := newBF16Cast()
	xd, wd := cast.of(x.data), cast.of(w.data)
	gemm := cast.gemm()
	switch {
	case b == nil || outF == 0 || rows == 0:
		gemm(false, true, rows, outF, in, 1, xd, in, wd, in, 0, out.data, outF)
	case cast == nil || !cast.native:
		// The bias goes into each tile of the output just before the
		// kernel adds the product to it.
		kernels.SgemmBias(false, true, rows, outF, in, 1, xd, in, wd, in, b.data, out.data, outF)
	default:
		// The product stored whole (beta 0: the bf16 kernel writes its
		// tiles straight into C), then the bias added row by row.
		gemm(false, true, rows, outF, in, 1, xd, in, wd, in, 0, out.data, outF)
		parallelFor(rows, max(1, elemMinItems/max(outF, 1)), func(_, lo, hi int) {
			addBias(out.data[lo*outF:hi*outF], b.data, 0)
		})
	}
	if cast == nil {
		// Backward reads the operands as they are then: holding them here
		// would keep storage that sharded data parallelism frees between
		// a layer's forward and its backward.
		xd, wd = nil, nil
	}
	var inputs = []*Tensor{x, w}
	if b != nil {
		inputs = append(inputs, b)
	}
	y := record(out, "linear", func(g []float32) {
		defer cast.release()
		if cast == nil { // the operands as they are now, as without autocast
			xd, wd = x.data, w.data
		}
		if b.needsGrad() {
			sumRows(b.accGrad(), g, rows)
		}
		g = cast.of(g)
		if x.needsGrad() {
			gx, fresh := x.gradDst()
			beta := float32(1)
			if fresh { // beta 0 overwrites gx without reading it
				beta = 0
			}
			gemm(false, false, rows, in, outF, 1, g, outF, wd, in, beta, gx, in)
		}
		if w.needsGrad() {
			gw, fresh := w.gradDst()
			beta := float32(1)
			if fresh {
				beta = 0
			}
			gemm(true, false, outF, in, rows, 1, g, outF, xd, in, beta, gw, in)
		}
	}, inputs...)
	if y.node == nil { // no backward will release them
		cast.release()
	}
	return y
}

// addBias adds bias to x, a run of rows of len(bias) elements that starts
// at column col of its first row.
func addBias(x, bias []float32, col int) {
	for i := 0; i < len(x); {
		n := min(len(x)-i, len(bias)-col)
		kernels.Add(x[i:i+n], bias[col:col+n])
		i += n
		col = 0
	}
}
