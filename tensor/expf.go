package tensor

import (
	"math"
)

// expf is e^x in float32 (Cephes' expf: range reduction by ln 2 and a
// degree-6 polynomial, within 2 ulp), several times faster than widening
// to math.Exp; softmax-like ops call it once per score. It returns 0 below
// −87.3 (where float32 results turn subnormal) and +Inf above 88.7.
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72283:
		return float32(math.Inf(1))
	case x < -87.33654:
		return 0
	}
	// n = round(x / ln 2) by the 1.5·2^23 trick, exact for |n| < 2^22.
	const magic = 12582912
	n := (x*1.44269504088896341 + magic) - magic
	r := x - n*0.693359375
	r -= n * -2.12194440e-4
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}
