//go:build !amd64 || noasm

package kernels

// Exp sets dst[i] = e^src[i] as Exp32 does (dst and src may be the same
// slice). len(dst) must be at least len(src).
func Exp(dst, src []float32) { expGeneric(dst[:len(src)], src) }

// The kernels exp_test.go compares; never called here (rowAVX512 is false).

func expF32AVX2(_, _ *float32, _ int) { panic("kernels: no assembly") }

func expF32AVX512(_, _ *float32, _ int) { panic("kernels: no assembly") }
