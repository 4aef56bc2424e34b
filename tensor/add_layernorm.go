package tensor

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/kernels"
)

// AddLayerNorm returns sum = x + y and norm = LayerNorm(sum, weight, bias,
// eps): a pre-LayerNorm transformer's residual connection and the
// normalisation that reads it, in one pass over the rows, each row of the
// sum normalised while it is still in cache rather than read back from
// memory by a second op. The numbers are Add's and LayerNorm's bit for
// bit, and both results are recorded as those ops record them, so sum may
// be read by other ops too (the next residual connection) and its
// gradient is the sum of what they and norm pass back. x and y must have
// the same shape (no broadcasting) and weight and bias (either may be
// nil) the shape [D] of the last dimension; a mismatch panics naming the
// shapes.
func AddLayerNorm(x, y, weight, bias *Tensor, eps float32) (sum, norm *Tensor) {
	if !sameShape(x.shape, y.shape) || x.Dim() == 0 {
		panic(fmt.Sprintf("tensor: AddLayerNorm: x %v and y %v must have one shape of at least one dimension", x.shape, y.shape))
	}
	d := x.shape[x.Dim()-1]
	for _, p := range []*Tensor{weight, bias} {
		if p != nil && (p.Dim() != 1 || p.shape[0] != d) {
			panic(fmt.Sprintf("tensor: AddLayerNorm: weight/bias %v does not match input %v (want [%d])", p.shape, x.shape, d))
		}
	}
	rows := 0
	if d > 0 {
		rows = len(x.data) / d
	}
	sum = &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	norm = &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	stats := make([]float32, 2*rows) // mean, 1/σ per row
	w, b := layerNormAffine(weight, bias, d)
	parallelFor(rows, layerNormMinRows, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			sr := sum.data[r*d : (r+1)*d]
			// Add's kernel, as Add applies it: the copy, then the sum.
			copy(sr, x.data[r*d:(r+1)*d])
			kernels.Add(sr, y.data[r*d:(r+1)*d])
			layerNormRow(norm.data[r*d:(r+1)*d], sr, w, b, stats[2*r:2*r+2], eps)
		}
	})
	sum = recordAdd(sum, x, y, sum.shape)
	return sum, recordLayerNorm(norm, sum, weight, bias, w, stats)
}
