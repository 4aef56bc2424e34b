//go:build !noasm

package kernels

// n is a positive multiple of 8 in all of these.

//go:noescape
func expShiftSumAVX2(dst, src *float32, n int, m float32) float32

//go:noescape
func maxOfAVX2(x *float32, n int) float32

//go:noescape
func subMulAVX2(dst, p *float32, n int, d float32)

//go:noescape
func dotAVX2(x, y *float32, n int) float32
