package optim

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/tensor"
)

// ClipGradNorm scales the gradients of params in place so that their
// total L2 norm (over all of them, as one vector) is at most maxNorm, and
// returns the total norm before clipping, as
// torch.nn.utils.clip_grad_norm_: the scale is maxNorm/(norm+1e-6) when
// that is below 1. Parameters without a gradient are skipped.
//
// Under DDP call it after Backward has returned and before the optimizer
// steps: Backward leaves the averaged gradients in place, so every rank
// computes the same norm and clips alike. A non-finite norm is returned
// and the gradients are scaled by a NaN, as PyTorch does without
// error_if_nonfinite; check the result to skip such a step. It panics if
// maxNorm is negative or NaN.
func ClipGradNorm(params []*tensor.Tensor, maxNorm float64) float64 {
	if !(maxNorm >= 0) {
		panic(fmt.Sprintf("optim: ClipGradNorm: invalid max norm %v", maxNorm))
	}
	var sq float64
	for _, p := range params {
		if g := p.Grad(); g != nil {
			sq += sumSquares(g.Data())
		}
	}
	norm := math.Sqrt(sq)
	coef := maxNorm / (norm + 1e-6)
	if coef < 1 || math.IsNaN(coef) {
		for _, p := range params {
			if g := p.Grad(); g != nil {
				kernels.Scale(float32(coef), g.Data())
			}
		}
	}
	return norm
}

// sumSquares is Σx², accumulated in float64 blocks of float32 sums (the
// vector dot product's): the float32 partial sums stay short enough to
// keep their precision.
func sumSquares(x []float32) float64 {
	var total float64
	for lo := 0; lo < len(x); lo += 256 {
		b := x[lo:min(lo+256, len(x))]
		total += float64(kernels.Dot(b, b))
	}
	return total
}
