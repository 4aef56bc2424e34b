package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// geluChunk is how many elements GELU hands kernels.GELU at a time.
const geluChunk = 256

// GELU returns x·Φ(x) elementwise with the exact erf form (PyTorch's
// default approximate='none'), in float32 as PyTorch computes it (erf to
// about 2e-7; kernels.GELU, vectorised). When autograd records it, the
// forward pass also stores the derivative Φ(x) + x·φ(x), so that backward
// is one multiplication: the erf and the exponentials are evaluated once
// per element per step. Large tensors spread over goroutines.
func GELU(x *Tensor) *Tensor {
	n := len(x.data)
	out := &Tensor{data: getBuf(n), shape: append([]int(nil), x.shape...)}
	var deriv []float32
	if GradEnabled() && (x.requiresGrad || x.released) {
		deriv = getBuf(n)
	}
	parallelFor((n+geluChunk-1)/geluChunk, elemMinItems/8/geluChunk, func(_, lo, hi int) {
		var scratch [geluChunk]float32
		for c := lo; c < hi; c++ {
			a, b := c*geluChunk, min((c+1)*geluChunk, n)
			dc := scratch[:b-a] // the derivative, when not kept
			if deriv != nil {
				dc = deriv[a:b]
			}
			kernels.GELU(out.data[a:b], dc, x.data[a:b])
		}
	})
	if deriv == nil {
		return out
	}
	return record(out, "gelu", func(g []float32) {
		if x.node != nil && x.passGrad == nil && len(g) > 0 && len(out.passGrad) > 0 && &out.passGrad[0] == &g[0] {
			// x's gradient is g·GELU' and nothing else has added to it:
			// multiply out's pass-local buffer in place and hand it on to
			// x (as Reshape does), one stream less than writing a third
			// buffer.
			parallelFor(n, elemMinItems, func(_, lo, hi int) {
				kernels.Mul(g[lo:hi], deriv[lo:hi])
			})
			x.passGrad, out.passGrad = g, nil
			putBuf(deriv)
			deriv = nil
			return
		}
		gx, fresh := x.gradDst()
		parallelFor(n, elemMinItems, func(_, lo, hi int) {
			if fresh {
				kernels.MulTo(gx[lo:hi], g[lo:hi], deriv[lo:hi])
			} else {
				kernels.AddMulTo(gx[lo:hi], g[lo:hi], deriv[lo:hi])
			}
		})
		putBuf(deriv)
		deriv = nil
	}, x)
}
