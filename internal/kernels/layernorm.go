package kernels

// Row kernels of LayerNorm (package tensor's fused primitive): one call
// per row of D elements, each a single pass over data that is in L1 by
// then. Reference loops:
//
//	SumSqDev:            Σ (x[j] − m)²
//	LayerNormAffine:     out[j] = (x[j] − m)·rstd·w[j] + b[j]
//	LayerNormGradStats:  x̂ = (x[j] − m)·rstd; pw[j] += g[j]·x̂; pb[j] += g[j];
//	                     returns Σ g[j]·w[j] and Σ g[j]·w[j]·x̂
//	LayerNormGradInput:  dx[j] (+)= (g[j]·w[j] − a − x̂·c)·rstd
//
// The sums keep eight or more partial sums (their order is not specified).
// With AVX-512 the kernels take sixteen floats at a time and give the same
// bits as the AVX2 ones, sums included (they keep the AVX2 partial sums
// and their order); the last len(x)%8 go through the Go code either way.

// SumSqDev returns Σ (x[i] − m)².
func SumSqDev(x []float32, m float32) float32 {
	body := 0
	var s float32
	if rowAsm() && len(x) >= 8 {
		body = len(x) &^ 7
		if rowAVX512 {
			s = sumSqDevAVX512(&x[0], body, m)
		} else {
			s = sumSqDevAVX2(&x[0], body, m)
		}
	}
	return s + sumSqDevGeneric(x[body:], m)
}

// LayerNormAffine sets out[i] = (x[i] − m)·rstd·w[i] + b[i]; out, w and b
// must be at least as long as x.
func LayerNormAffine(out, x, w, b []float32, m, rstd float32) {
	n := len(x)
	out, w, b = out[:n], w[:n], b[:n]
	body := 0
	if rowAsm() && n >= 8 {
		body = n &^ 7
		if rowAVX512 {
			layerNormAffineAVX512(&out[0], &x[0], &w[0], &b[0], body, m, rstd)
		} else {
			layerNormAffineAVX2(&out[0], &x[0], &w[0], &b[0], body, m, rstd)
		}
	}
	layerNormAffineGeneric(out[body:], x[body:], w[body:], b[body:], m, rstd)
}

// LayerNormGradStats accumulates one row's contribution to the weight and
// bias gradients (pw += g·x̂, pb += g, x̂ = (x − m)·rstd) and returns
// Σ g·w and Σ g·w·x̂, the two row sums of the input gradient. pw, pb, g
// and w must be at least as long as x.
func LayerNormGradStats(pw, pb, x, g, w []float32, m, rstd float32) (sg, sgx float32) {
	n := len(x)
	pw, pb, g, w = pw[:n], pb[:n], g[:n], w[:n]
	body := 0
	if rowAsm() && n >= 8 {
		body = n &^ 7
		if rowAVX512 {
			sg, sgx = layerNormGradStatsAVX512(&pw[0], &pb[0], &x[0], &g[0], &w[0], body, m, rstd)
		} else {
			sg, sgx = layerNormGradStatsAVX2(&pw[0], &pb[0], &x[0], &g[0], &w[0], body, m, rstd)
		}
	}
	tg, tgx := layerNormGradStatsGeneric(pw[body:], pb[body:], x[body:], g[body:], w[body:], m, rstd)
	return sg + tg, sgx + tgx
}

// LayerNormGradInput sets dx[i] = (g[i]·w[i] − a − x̂·c)·rstd, x̂ =
// (x[i] − m)·rstd, or adds it to dx[i] when add is set. dx, g and w must
// be at least as long as x.
func LayerNormGradInput(dx, x, g, w []float32, m, rstd, a, c float32, add bool) {
	n := len(x)
	dx, g, w = dx[:n], g[:n], w[:n]
	body := 0
	if rowAsm() && n >= 8 {
		body = n &^ 7
		flag := 0
		if add {
			flag = 1
		}
		if rowAVX512 {
			layerNormGradInputAVX512(&dx[0], &x[0], &g[0], &w[0], body, m, rstd, a, c, flag)
		} else {
			layerNormGradInputAVX2(&dx[0], &x[0], &g[0], &w[0], body, m, rstd, a, c, flag)
		}
	}
	layerNormGradInputGeneric(dx[body:], x[body:], g[body:], w[body:], m, rstd, a, c, add)
}

func sumSqDevGeneric(x []float32, m float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a, b, c, d := x[i]-m, x[i+1]-m, x[i+2]-m, x[i+3]-m
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(x); i++ {
		a := x[i] - m
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}

func layerNormAffineGeneric(out, x, w, b []float32, m, rstd float32) {
	for i, v := range x {
		out[i] = (v-m)*rstd*w[i] + b[i]
	}
}

func layerNormGradStatsGeneric(pw, pb, x, g, w []float32, m, rstd float32) (sg, sgx float32) {
	for i, gv := range g[:len(x)] {
		xh := (x[i] - m) * rstd
		pw[i] += gv * xh
		pb[i] += gv
		gw := gv * w[i]
		sg += gw
		sgx += gw * xh
	}
	return sg, sgx
}

func layerNormGradInputGeneric(dx, x, g, w []float32, m, rstd, a, c float32, add bool) {
	for i, v := range x {
		xh := (v - m) * rstd
		d := (g[i]*w[i] - a - xh*c) * rstd
		if add {
			dx[i] += d
		} else {
			dx[i] = d
		}
	}
}
