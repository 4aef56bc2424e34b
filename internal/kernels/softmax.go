package kernels

import "math"

// Row kernels of a softmax over blocks of scores (package tensor's fused
// attention), one pass each. Reference loops:
//
//	ExpShiftSum: dst[i] = Exp32(src[i] − m); returns Σ dst[i]
//	MaxOf:       returns max over i of x[i]
//	SubMul:      dst[i] = p[i]·(dst[i] − d)
//	Dot:         returns Σ x[i]·y[i]
//
// The sums keep eight or more partial sums (their order is not specified).
// With AVX-512 the kernels take sixteen floats at a time and give the same
// bits as the AVX2 ones (ExpShiftSum's and Dot's sums keep the AVX2 partial
// sums and order), except that MaxOf combines its lanes in another order:
// the same maximum, but with NaNs or zeros of both signs it may return
// another of them.

// ExpShiftSum sets dst[i] = e^(src[i] − m), as Exp computes e^x, and
// returns the sum of the results: the numerators and the denominator of a
// softmax shifted by its maximum m. dst and src may be the same slice;
// len(dst) must be at least len(src).
func ExpShiftSum(dst, src []float32, m float32) float32 {
	n := len(src)
	dst = dst[:n]
	body := 0
	var s float32
	if rowAsm() && n >= 8 {
		body = n &^ 7
		if rowAVX512 {
			s = expShiftSumAVX512(&dst[0], &src[0], body, m)
		} else {
			s = expShiftSumAVX2(&dst[0], &src[0], body, m)
		}
	}
	for i := body; i < n; i++ {
		dst[i] = Exp32(src[i] - m)
		s += dst[i]
	}
	return s
}

// MaxOf returns the largest element of x, −Inf when x is empty. A NaN
// element may or may not be returned.
func MaxOf(x []float32) float32 {
	n := len(x)
	body := 0
	m := float32(math.Inf(-1))
	if rowAsm() && n >= 8 {
		body = n &^ 7
		if rowAVX512 {
			m = maxOfAVX512(&x[0], body)
		} else {
			m = maxOfAVX2(&x[0], body)
		}
	}
	for _, v := range x[body:] {
		m = max(m, v)
	}
	return m
}

// SubMul sets dst[i] = p[i]·(dst[i] − d), the gradient of softmax scores
// dS = P∘(dP − D) for one row. len(p) must be at least len(dst).
func SubMul(dst, p []float32, d float32) {
	n := len(dst)
	p = p[:n]
	body := 0
	if rowAsm() && n >= 8 {
		body = n &^ 7
		if rowAVX512 {
			subMulAVX512(&dst[0], &p[0], body, d)
		} else {
			subMulAVX2(&dst[0], &p[0], body, d)
		}
	}
	for i := body; i < n; i++ {
		dst[i] = p[i] * (dst[i] - d)
	}
}

// Dot returns Σ x[i]·y[i]. len(y) must be at least len(x).
func Dot(x, y []float32) float32 {
	n := len(x)
	y = y[:n]
	body := 0
	var s float32
	if rowAsm() && n >= 8 {
		body = n &^ 7
		if rowAVX512 {
			s = dotAVX512(&x[0], &y[0], body)
		} else {
			s = dotAVX2(&x[0], &y[0], body)
		}
	}
	for i := body; i < n; i++ {
		s += x[i] * y[i]
	}
	return s
}
