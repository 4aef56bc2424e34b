//go:build !noasm

package kernels

// n is a multiple of 8 in both (exp_amd64.s).

//go:noescape
func expF32AVX2(dst, src *float32, n int)

//go:noescape
func expF32AVX512(dst, src *float32, n int)

// Exp sets dst[i] = e^src[i] as Exp32 does, within 2 ulp of it (the
// vector code fuses multiply-adds); dst and src may be the same slice.
// len(dst) must be at least len(src). With AVX2 and FMA it computes eight
// at a time, with AVX-512 sixteen; the last len(src)%8 go through Exp32
// either way, so AVX2 and AVX-512 CPUs give the same bits.
func Exp(dst, src []float32) {
	n := len(src)
	dst = dst[:n]
	body := 0
	if hasAVX2 && n >= 8 {
		body = n &^ 7
		if rowAVX512 {
			expF32AVX512(&dst[0], &src[0], body)
		} else {
			expF32AVX2(&dst[0], &src[0], body)
		}
	}
	expGeneric(dst[body:], src[body:])
}
