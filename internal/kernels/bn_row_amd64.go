//go:build !noasm

package kernels

// bnRowAVX512 runs BatchNorm's row loops with AVX-512F; n is a positive
// multiple of 16 in all three, and a nil res or o is passed as nil.
var bnRowAVX512 = &bnRowImpl{
	norm: func(dst, x, res []float32, mu, is, a, sh float32, relu bool) {
		bnNormRowAVX512(&dst[0], &x[0], first(res), len(x), mu, is, a, sh, b2i(relu))
	},
	gradSums: func(g, o, x []float32, mu, is float32) (float64, float64) {
		return bnGradSumsAVX512(&g[0], first(o), &x[0], len(g), mu, is)
	},
	gradInput: func(dx, g, o, x []float32, mu, is, k, mg, mgh float32, add bool) {
		bnGradInputAVX512(&dx[0], &g[0], first(o), &x[0], len(g), mu, is, k, mg, mgh, b2i(add))
	},
}

var bnRow = func() *bnRowImpl {
	if hasAVX512 {
		return bnRowAVX512
	}
	return bnRowGeneric
}()

// allBNRows lists the loops bn_row_test.go compares with the generic
// ones: those this machine runs.
func allBNRows() []*bnRowImpl {
	if hasAVX512 {
		return []*bnRowImpl{bnRowAVX512}
	}
	return nil
}

// first returns &v[0], or nil for an empty v.
func first(v []float32) *float32 {
	if len(v) == 0 {
		return nil
	}
	return &v[0]
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

//go:noescape
func bnNormRowAVX512(dst, x, res *float32, n int, mu, is, a, sh float32, relu int)

//go:noescape
func bnGradSumsAVX512(gp, op, xp *float32, n int, mu, is float32) (sum, dot float64)

//go:noescape
func bnGradInputAVX512(dx, gp, op, xp *float32, n int, mu, is, k, mg, mgh float32, add int)
