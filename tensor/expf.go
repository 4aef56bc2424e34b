package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// expf is e^x in float32 (kernels.Exp32; kernels.Exp does slices).
func expf(x float32) float32 { return kernels.Exp32(x) }

// erff is erf(x) in float32, within about 2e-7 of the true value: x·P(x²)
// for |x| < 0.9 and 1 − exp(Q(|x|)) up to 4, beyond which erf rounds to
// ±1 (polynomials fitted to log erfc by least squares on Chebyshev nodes).
// GELU calls it once per element; math.Erf in float64 costs several times
// as much.
func erff(x float32) float32 {
	a := x
	if a < 0 {
		a = -a
	}
	if a < 0.9 {
		s := x * x
		p := float32(-0.0006144141940467961)
		p = p*s + 0.005023298825940735
		p = p*s - 0.026787409500541332
		p = p*s + 0.11282408984392
		p = p*s - 0.3761255503548909
		p = p*s + 1.1283791618914825
		return x * p
	}
	if !(a < 4) { // also NaN
		if x != x {
			return x
		}
		if x < 0 {
			return -1
		}
		return 1
	}
	q := float32(1.6102230208663905e-06)
	q = q*a - 4.551243747773261e-05
	q = q*a + 0.000592090001743068
	q = q*a - 0.004736938043733908
	q = q*a + 0.026355085980683462
	q = q*a - 0.10996073978909128
	q = q*a - 0.631956303098577
	q = q*a - 1.130155066320774
	q = q*a + 0.00030026033342093203
	r := 1 - expf(q)
	if x < 0 {
		return -r
	}
	return r
}
