package kernels

import "math"

// geluChunk is how many elements geluGeneric evaluates at a time: its
// exponentials go through Exp in runs of this length.
const geluChunk = 256

// geluGeneric is GELU without assembly.
func geluGeneric(out, deriv, x []float32) {
	var ps [geluChunk]float32
	for a := 0; a < len(x); a += geluChunk {
		b := min(a+geluChunk, len(x))
		geluRun(out[a:b], deriv[a:b], x[a:b], ps[:b-a])
	}
}

// geluRun sets out = GELU(x) and deriv = GELU'(x) for one run of at most
// geluChunk elements; p is scratch of len(x). erf(z), z = x/√2, is
// |z|·P(z²) below 0.9 and 1 − e^(−z²)·R(1/|z|) above (R taken at
// min(|z|, 4), where erf rounds to 1), with z's sign. e^(−z²) = e^(−x²/2)
// is also φ's exponential, so one exponential per element serves both.
// P (degree 5) was fitted by least squares on Chebyshev nodes within 2e-8
// of erf, and R (degree 7) to erfcx(a) = e^(a²)·erfc(a) on [0.9, 4]
// within 4e-7 relative (in float32), so erf is within about 1.2e-7. The
// loops have no data-dependent branches (the pieces are chosen by bit
// masks), since a mispredicted branch per element costs more than
// evaluating both polynomials; the exponentials go through the vector
// kernel.
func geluRun(out, deriv, x, p []float32) {
	const invSqrt2, invSqrt2Pi = 0.7071067811865476, 0.3989422804014327
	for i, v := range x {
		p[i] = -0.5 * v * v
	}
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
		t := 1 / min(max(a, 0.9), 4) // NaN stays NaN
		r := float32(-0.01814175769686699)
		r = r*t + 0.12182540446519852
		r = r*t - 0.35600587725639343
		r = r*t + 0.5771933197975159
		r = r*t - 0.5064822435379028
		r = r*t + 0.051108576357364655
		r = r*t + 0.5577371120452881
		r = r*t + 0.000349069363437593
		large := math.Float32bits(1 - p[i]*r)
		useSmall := uint32(int32(math.Float32bits(a-0.9)) >> 31) // all ones when |z| < 0.9
		e := math.Float32frombits((small&useSmall | large&^useSmall) | bits&0x80000000)
		cdf := 0.5 * (1 + e)
		out[i] = v * cdf
		// v clamped, so that ±Inf gives φ·v = 0, not NaN.
		deriv[i] = cdf + min(max(v, -20), 20)*p[i]*invSqrt2Pi
	}
}
