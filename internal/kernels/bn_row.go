package kernels

// BatchNorm's element-wise row loops. Each works on whole rows of one
// channel (mean mu, 1/σ is) and writes or reads x̂ = (x − mu)·is, rounded
// to float32 as written, without keeping it. The AVX-512 loops do the same
// float32 operations in the same order, so both give the same bits.

// BNNormRow writes dst = act(x̂·a + sh + res) for the row x: the
// residual res is added unless nil, and act is ReLU (v > 0 ? v : +0) if
// relu, else the identity.
func BNNormRow(dst, x, res []float32, mu, is, a, sh float32, relu bool) {
	dst = dst[:len(x)]
	if res != nil {
		res = res[:len(x)]
	}
	n16 := len(x) &^ 15
	if n16 > 0 {
		bnRow.norm(dst[:n16], x[:n16], sub(res, 0, n16), mu, is, a, sh, relu)
	}
	if n16 < len(x) {
		bnNormGeneric(dst[n16:], x[n16:], sub(res, n16, len(x)), mu, is, a, sh, relu)
	}
}

// BNGradSums returns Σg' and Σg'·x̂ over a row in float64, in
// BNSumDot64's order: g' = g where o > 0, else +0 (ReLU's gradient; g' = g
// if o is nil).
func BNGradSums(g, o, x []float32, mu, is float32) (sum, dot float64) {
	x = x[:len(g)]
	if o != nil {
		o = o[:len(g)]
	}
	n16 := len(g) &^ 15
	if n16 > 0 {
		sum, dot = bnRow.gradSums(g[:n16], sub(o, 0, n16), x[:n16], mu, is)
	}
	for j := n16; j < len(g); j++ {
		gv := bnMask(g, o, j)
		h := (x[j] - mu) * is
		sum += float64(gv)
		dot += float64(float64(gv) * float64(h))
	}
	return sum, dot
}

// BNGradInput writes dx = k·(g' − mg − x̂·mgh) for the row, with g' as
// in BNGradSums, or adds it to dx if add.
func BNGradInput(dx, g, o, x []float32, mu, is, k, mg, mgh float32, add bool) {
	dx, x = dx[:len(g)], x[:len(g)]
	if o != nil {
		o = o[:len(g)]
	}
	n16 := len(g) &^ 15
	if n16 > 0 {
		bnRow.gradInput(dx[:n16], g[:n16], sub(o, 0, n16), x[:n16], mu, is, k, mg, mgh, add)
	}
	if n16 < len(g) {
		bnGradInputGeneric(dx[n16:], g[n16:], sub(o, n16, len(g)), x[n16:], mu, is, k, mg, mgh, add)
	}
}

// sub returns v[lo:hi], or nil if v is nil.
func sub(v []float32, lo, hi int) []float32 {
	if v == nil {
		return nil
	}
	return v[lo:hi]
}

// bnMask is g'[j].
func bnMask(g, o []float32, j int) float32 {
	if o != nil && !(o[j] > 0) {
		return 0
	}
	return g[j]
}

// bnRowImpl holds the loops over rows of a multiple of 16 values.
type bnRowImpl struct {
	norm      func(dst, x, res []float32, mu, is, a, sh float32, relu bool)
	gradSums  func(g, o, x []float32, mu, is float32) (float64, float64)
	gradInput func(dx, g, o, x []float32, mu, is, k, mg, mgh float32, add bool)
}

var bnRowGeneric = &bnRowImpl{norm: bnNormGeneric, gradSums: bnGradSums16Generic, gradInput: bnGradInputGeneric}

// The float32 conversions below keep each product rounded (no fused
// multiply-add), as the vector loops' separate instructions do.

func bnNormGeneric(dst, x, res []float32, mu, is, a, sh float32, relu bool) {
	for j, xv := range x {
		y := float32(float32((xv-mu)*is)*a) + sh
		if res != nil {
			y += res[j]
		}
		if relu && !(y > 0) {
			y = 0
		}
		dst[j] = y
	}
}

func bnGradSums16Generic(g, o, x []float32, mu, is float32) (float64, float64) {
	var sa, sb, da, db [8]float64
	for k := 0; k+16 <= len(g); k += 16 {
		for j := range 8 {
			g0, g1 := float64(bnMask(g, o, k+j)), float64(bnMask(g, o, k+8+j))
			h0, h1 := float64((x[k+j]-mu)*is), float64((x[k+8+j]-mu)*is)
			sa[j] += g0
			sb[j] += g1
			da[j] += float64(g0 * h0)
			db[j] += float64(g1 * h1)
		}
	}
	return bnFold(&sa, &sb), bnFold(&da, &db)
}

func bnGradInputGeneric(dx, g, o, x []float32, mu, is, k, mg, mgh float32, add bool) {
	for j := range g {
		h := (x[j] - mu) * is
		v := k * ((bnMask(g, o, j) - mg) - float32(h*mgh))
		if add {
			v = dx[j] + v
		}
		dx[j] = v
	}
}
