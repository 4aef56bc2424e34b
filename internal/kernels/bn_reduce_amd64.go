//go:build !noasm

package kernels

// bnReduceAVX512 runs BatchNorm's channel sums with AVX-512F; n is a
// positive multiple of 16 in all three.
var bnReduceAVX512 = &bnReduceImpl{
	sum:   func(x []float32) float64 { return bnSum64AVX512(&x[0], len(x)) },
	sqDev: func(x []float32, mu float64) float64 { return bnSqDev64AVX512(&x[0], len(x), mu) },
	sumDot: func(g, h []float32) (float64, float64) {
		h = h[:len(g)]
		return bnSumDot64AVX512(&g[0], &h[0], len(g))
	},
	shiftSums: func(x []float32, k float64) (float64, float64) { return bnShiftSums64AVX512(&x[0], len(x), k) },
}

var bnReduce = func() *bnReduceImpl {
	if hasAVX512 {
		return bnReduceAVX512
	}
	return bnReduceGeneric
}()

// allBNReduces lists the loops bn_reduce_test.go compares with the
// generic ones: those this machine runs.
func allBNReduces() []*bnReduceImpl {
	if hasAVX512 {
		return []*bnReduceImpl{bnReduceAVX512}
	}
	return nil
}

//go:noescape
func bnSum64AVX512(x *float32, n int) float64

//go:noescape
func bnSqDev64AVX512(x *float32, n int, mu float64) float64

//go:noescape
func bnSumDot64AVX512(gp, hp *float32, n int) (sum, dot float64)

//go:noescape
func bnShiftSums64AVX512(x *float32, n int, k float64) (sum, sq float64)
