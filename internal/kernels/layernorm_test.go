package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// lnClose reports whether got is within a float32 rounding tolerance of
// want, relative to scale (the size of the terms summed).
func lnClose(got float32, want, scale float64) bool {
	return math.Abs(float64(got)-want) <= 1e-5*math.Max(1, scale)
}

// TestLayerNormKernels checks the LayerNorm row kernels (vector code and
// Go tail) against float64 versions of their reference loops at every
// length up to 41 and at 128 and 131, adding into non-zero gradients.
func TestLayerNormKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vec := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	lengths := []int{128, 131}
	for n := 0; n <= 41; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		x, w, b, g := vec(n, 2), vec(n, 1), vec(n, 1), vec(n, 1)
		m, rstd := float32(0.3), float32(0.7)

		var want, scale float64
		for _, v := range x {
			d := float64(v) - float64(m)
			want += d * d
			scale += d * d
		}
		if got := SumSqDev(x, m); !lnClose(got, want, scale) {
			t.Fatalf("n=%d: SumSqDev = %v, want %v", n, got, want)
		}

		out := vec(n, 1)
		LayerNormAffine(out, x, w, b, m, rstd)
		for i, v := range x {
			want := (float64(v)-float64(m))*float64(rstd)*float64(w[i]) + float64(b[i])
			if !lnClose(out[i], want, 1) {
				t.Fatalf("n=%d: LayerNormAffine[%d] = %v, want %v", n, i, out[i], want)
			}
		}

		pw, pb := vec(n, 1), vec(n, 1)
		pw0, pb0 := append([]float32(nil), pw...), append([]float32(nil), pb...)
		sg, sgx := LayerNormGradStats(pw, pb, x, g, w, m, rstd)
		var wsg, wsgx, abs float64
		for i, v := range x {
			xh := (float64(v) - float64(m)) * float64(rstd)
			gw := float64(g[i]) * float64(w[i])
			wsg += gw
			wsgx += gw * xh
			abs += math.Abs(gw) * math.Max(1, math.Abs(xh))
			if !lnClose(pw[i], float64(pw0[i])+float64(g[i])*xh, 1) || !lnClose(pb[i], float64(pb0[i])+float64(g[i]), 1) {
				t.Fatalf("n=%d: LayerNormGradStats pw[%d], pb[%d] = %v, %v", n, i, i, pw[i], pb[i])
			}
		}
		if !lnClose(sg, wsg, abs) || !lnClose(sgx, wsgx, abs) {
			t.Fatalf("n=%d: LayerNormGradStats = %v, %v, want %v, %v", n, sg, sgx, wsg, wsgx)
		}

		a, c := float32(0.1), float32(-0.2)
		for _, add := range []bool{false, true} {
			dx := vec(n, 1)
			dx0 := append([]float32(nil), dx...)
			LayerNormGradInput(dx, x, g, w, m, rstd, a, c, add)
			for i, v := range x {
				xh := (float64(v) - float64(m)) * float64(rstd)
				want := (float64(g[i])*float64(w[i]) - float64(a) - xh*float64(c)) * float64(rstd)
				if add {
					want += float64(dx0[i])
				}
				if !lnClose(dx[i], want, 1) {
					t.Fatalf("n=%d add=%v: LayerNormGradInput[%d] = %v, want %v", n, add, i, dx[i], want)
				}
			}
		}
	}
}
