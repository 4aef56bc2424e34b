package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// geluChunk is how many elements GELU evaluates at a time: its
// exponentials go through the vector kernel in runs of this length.
const geluChunk = 256

// GELU returns x·Φ(x) elementwise with the exact erf form (PyTorch's
// default approximate='none'), in float32 as PyTorch computes it (erf to
// about 2e-7). When autograd records it, the forward pass also stores the
// derivative Φ(x) + x·φ(x), so that backward is one multiplication: the
// erf and the exponentials are evaluated once per element per step. Large
// tensors spread over goroutines.
func GELU(x *Tensor) *Tensor {
	n := len(x.data)
	out := &Tensor{data: getBuf(n), shape: append([]int(nil), x.shape...)}
	var deriv []float32
	if GradEnabled() && (x.requiresGrad || x.released) {
		deriv = getBuf(n)
	}
	parallelFor((n+geluChunk-1)/geluChunk, elemMinItems/8/geluChunk, func(_, lo, hi int) {
		var qs, ps [geluChunk]float32
		for c := lo; c < hi; c++ {
			a, b := c*geluChunk, min((c+1)*geluChunk, n)
			var dc []float32
			if deriv != nil {
				dc = deriv[a:b]
			}
			geluRun(out.data[a:b], dc, x.data[a:b], qs[:b-a], ps[:b-a])
		}
	})
	if deriv == nil {
		return out
	}
	return record(out, "gelu", func(g []float32) {
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

// geluRun sets out = GELU(x) and, if deriv is not nil, deriv = GELU'(x)
// for one run of at most geluChunk elements; q and p are scratch of
// len(x). erf(z), z = x/√2, is erff's: z·P(z²) below 0.9, 1 − exp(Q(|z|))
// below 4, ±1 beyond; the exponentials of Q and of −x²/2 (for φ) go
// through the vector kernel.
func geluRun(out, deriv, x, q, p []float32) {
	const invSqrt2, invSqrt2Pi = 0.7071067811865476, 0.3989422804014327
	for i, v := range x {
		a := v * invSqrt2
		if a < 0 {
			a = -a
		}
		r := float32(0)
		if a >= 0.9 && a < 4 {
			r = float32(1.6102230208663905e-06)
			r = r*a - 4.551243747773261e-05
			r = r*a + 0.000592090001743068
			r = r*a - 0.004736938043733908
			r = r*a + 0.026355085980683462
			r = r*a - 0.10996073978909128
			r = r*a - 0.631956303098577
			r = r*a - 1.130155066320774
			r = r*a + 0.00030026033342093203
		}
		q[i] = r
		p[i] = -0.5 * v * v
	}
	kernels.Exp(q, q)
	if deriv != nil {
		kernels.Exp(p, p)
	}
	for i, v := range x {
		z := v * invSqrt2
		a := z
		if a < 0 {
			a = -a
		}
		var e float32
		switch {
		case a < 0.9:
			s := z * z
			pz := float32(-0.0006144141940467961)
			pz = pz*s + 0.005023298825940735
			pz = pz*s - 0.026787409500541332
			pz = pz*s + 0.11282408984392
			pz = pz*s - 0.3761255503548909
			pz = pz*s + 1.1283791618914825
			e = z * pz
		case a < 4:
			e = 1 - q[i]
			if z < 0 {
				e = -e
			}
		case z != z:
			e = z
		case z < 0:
			e = -1
		default:
			e = 1
		}
		cdf := 0.5 * (1 + e)
		out[i] = v * cdf
		if deriv != nil {
			deriv[i] = cdf + v*p[i]*invSqrt2Pi
		}
	}
}
