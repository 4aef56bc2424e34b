//go:build !noasm

package kernels

// n is a positive multiple of 8 in all of these. The AVX-512 versions
// give the same bits as the AVX2 ones, except MaxOf's for NaN and the
// sign of a zero maximum (its lanes are combined in another order).

//go:noescape
func expShiftSumAVX2(dst, src *float32, n int, m float32) float32

//go:noescape
func expShiftSumAVX512(dst, src *float32, n int, m float32) float32

//go:noescape
func maxOfAVX2(x *float32, n int) float32

//go:noescape
func maxOfAVX512(x *float32, n int) float32

//go:noescape
func subMulAVX2(dst, p *float32, n int, d float32)

//go:noescape
func subMulAVX512(dst, p *float32, n int, d float32)

//go:noescape
func dotAVX2(x, y *float32, n int) float32

//go:noescape
func dotAVX512(x, y *float32, n int) float32
