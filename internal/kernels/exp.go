package kernels

import "math"

// Exp32 is e^x in float32 (Cephes' expf: range reduction by ln 2 and a
// degree-6 polynomial, within 2 ulp). It returns 0 below −87.33654 (where
// float32 results turn subnormal), +Inf above 88.37626 and NaN for NaN.
// Exp computes the same on whole slices with vector instructions.
func Exp32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > expHi:
		return float32(math.Inf(1))
	case x < expLo:
		return 0
	}
	// n = round(x / ln 2) by the 1.5·2^23 trick, exact for |n| < 2^22.
	n := (x*expLog2e + expMagic) - expMagic
	r := x - n*expLn2Hi
	r -= n * expLn2Lo
	p := float32(expC0)
	p = p*r + expC1
	p = p*r + expC2
	p = p*r + expC3
	p = p*r + expC4
	p = p*r + expC5
	p = p*r*r + r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// The constants of Exp32, shared with the assembly (exp_amd64.s holds
// their bit patterns).
const (
	expHi    = 88.37626 // 127.5·ln 2: beyond, 2^n would overflow
	expLo    = -87.33654
	expLog2e = 1.44269504088896341
	expMagic = 12582912 // 1.5·2^23
	expLn2Hi = 0.693359375
	expLn2Lo = -2.12194440e-4
	expC0    = 1.9875691500e-4
	expC1    = 1.3981999507e-3
	expC2    = 8.3334519073e-3
	expC3    = 4.1665795894e-2
	expC4    = 1.6666665459e-1
	expC5    = 5.0000001201e-1
)

func expGeneric(dst, src []float32) {
	for i, v := range src {
		dst[i] = Exp32(v)
	}
}
