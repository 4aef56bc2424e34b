package kernels

import "math"

// geluChunk is how many elements geluGeneric evaluates at a time: its
// exponentials go through Exp in runs of this length.
const geluChunk = 256

// geluGeneric is GELU without assembly.
func geluGeneric(out, deriv, x []float32) {
	var qs, ps [geluChunk]float32
	for a := 0; a < len(x); a += geluChunk {
		b := min(a+geluChunk, len(x))
		geluRun(out[a:b], deriv[a:b], x[a:b], qs[:b-a], ps[:b-a])
	}
}

// geluRun sets out = GELU(x) and deriv = GELU'(x)
// for one run of at most geluChunk elements; q and p are scratch of
// len(x). erf(z), z = x/√2, is erff's: |z|·P(z²) below 0.9 and
// 1 − exp(Q(|z|)) above (Q taken at min(|z|, 4), where it rounds to 1),
// with z's sign. The loops have no data-dependent branches (the pieces
// are chosen by bit masks), since a mispredicted branch per element costs
// more than evaluating both polynomials; the exponentials of Q and of
// −x²/2 (for φ) go through the vector kernel.
func geluRun(out, deriv, x, q, p []float32) {
	const invSqrt2, invSqrt2Pi = 0.7071067811865476, 0.3989422804014327
	for i, v := range x {
		a := min(max(math.Abs(float64(v))*invSqrt2, 0.9), 4) // NaN stays NaN
		r := float32(1.6102230208663905e-06)
		af := float32(a)
		r = r*af - 4.551243747773261e-05
		r = r*af + 0.000592090001743068
		r = r*af - 0.004736938043733908
		r = r*af + 0.026355085980683462
		r = r*af - 0.10996073978909128
		r = r*af - 0.631956303098577
		r = r*af - 1.130155066320774
		r = r*af + 0.00030026033342093203
		q[i] = r
		p[i] = -0.5 * v * v
	}
	Exp(q, q)
	Exp(p, p)
	for i, v := range x {
		bits := math.Float32bits(v)
		a := math.Float32frombits(bits&0x7fffffff) * invSqrt2 // |z|
		s := a * a
		pz := float32(-0.0006144141940467961)
		pz = pz*s + 0.005023298825940735
		pz = pz*s - 0.026787409500541332
		pz = pz*s + 0.11282408984392
		pz = pz*s - 0.3761255503548909
		pz = pz*s + 1.1283791618914825
		small := math.Float32bits(a * pz)
		large := math.Float32bits(1 - q[i])
		useSmall := uint32(int32(math.Float32bits(a-0.9)) >> 31) // all ones when |z| < 0.9
		e := math.Float32frombits((small&useSmall | large&^useSmall) | bits&0x80000000)
		cdf := 0.5 * (1 + e)
		out[i] = v * cdf
		// v clamped, so that ±Inf gives φ·v = 0, not NaN.
		deriv[i] = cdf + min(max(v, -20), 20)*p[i]*invSqrt2Pi
	}
}
