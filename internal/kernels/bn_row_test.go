package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBNRows checks BatchNorm's row loops against per-element formulas
// and the vector loops this machine runs against the generic ones bit for
// bit, with and without residual, ReLU and mask, on lengths around the
// 16-value blocks; the mask input holds ±0 and NaN.
func TestBNRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const mu, is, a, sh, k, mg, mgh = 0.25, 1.75, 0.8, -0.3, 1.3, 0.05, -0.2
	for _, n := range []int{1, 15, 16, 17, 33, 49, 3136} {
		x, g, o, r, dx0 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			g[i] = float32(rng.NormFloat64())
			r[i] = float32(rng.NormFloat64())
			dx0[i] = float32(rng.NormFloat64())
			o[i] = float32(rng.NormFloat64())
			switch i % 11 {
			case 3:
				o[i] = 0
			case 5:
				o[i] = float32(math.Copysign(0, -1))
			case 7:
				o[i] = float32(math.NaN())
			}
		}
		xh := func(j int) float32 { return (x[j] - mu) * is }
		for _, relu := range []bool{false, true} {
			for _, res := range [][]float32{nil, r} {
				name := fmt.Sprintf("n %d relu %v residual %v", n, relu, res != nil)
				got := make([]float32, n)
				BNNormRow(got, x, res, mu, is, a, sh, relu)
				for j := range got {
					want := xh(j)*a + sh
					if res != nil {
						want += res[j]
					}
					if relu {
						want = max(want, 0)
					}
					if got[j] != want {
						t.Fatalf("%s: BNNormRow[%d] = %v, want %v", name, j, got[j], want)
					}
				}
				for _, impl := range allBNRows() {
					n16 := n &^ 15
					if n16 == 0 {
						continue
					}
					v, w := make([]float32, n16), make([]float32, n16)
					impl.norm(v, x[:n16], sub(res, 0, n16), mu, is, a, sh, relu)
					bnRowGeneric.norm(w, x[:n16], sub(res, 0, n16), mu, is, a, sh, relu)
					if !bitsEqual(v, w) {
						t.Errorf("%s: vector norm differs from generic", name)
					}
				}
			}
		}
		for _, mask := range [][]float32{nil, o} {
			name := fmt.Sprintf("n %d mask %v", n, mask != nil)
			gm := make([]float32, n)
			for j := range gm {
				gm[j] = bnMask(g, mask, j)
				if mask != nil && !(mask[j] > 0) && gm[j] != 0 {
					t.Fatalf("%s: g'[%d] = %v where o = %v", name, j, gm[j], mask[j])
				}
			}
			hs := make([]float32, n)
			for j := range hs {
				hs[j] = xh(j)
			}
			s, d := BNGradSums(g, mask, x, mu, is)
			ws, wd := BNSumDot64(gm, hs)
			if math.Float64bits(s) != math.Float64bits(ws) || math.Float64bits(d) != math.Float64bits(wd) {
				t.Errorf("%s: BNGradSums = %v, %v; BNSumDot64 of g' and x̂ = %v, %v", name, s, d, ws, wd)
			}
			for _, add := range []bool{false, true} {
				got := slices.Clone(dx0)
				BNGradInput(got, g, mask, x, mu, is, k, mg, mgh, add)
				for j := range got {
					want := k * (gm[j] - mg - hs[j]*mgh)
					if add {
						want = dx0[j] + want
					}
					if got[j] != want {
						t.Fatalf("%s add %v: BNGradInput[%d] = %v, want %v", name, add, j, got[j], want)
					}
				}
			}
			for _, impl := range allBNRows() {
				n16 := n &^ 15
				if n16 == 0 {
					continue
				}
				vs, vd := impl.gradSums(g[:n16], sub(mask, 0, n16), x[:n16], mu, is)
				gs, gd := bnRowGeneric.gradSums(g[:n16], sub(mask, 0, n16), x[:n16], mu, is)
				if math.Float64bits(vs) != math.Float64bits(gs) || math.Float64bits(vd) != math.Float64bits(gd) {
					t.Errorf("%s: vector gradSums %v, %v; generic %v, %v", name, vs, vd, gs, gd)
				}
				for _, add := range []bool{false, true} {
					v, w := slices.Clone(dx0[:n16]), slices.Clone(dx0[:n16])
					impl.gradInput(v, g[:n16], sub(mask, 0, n16), x[:n16], mu, is, k, mg, mgh, add)
					bnRowGeneric.gradInput(w, g[:n16], sub(mask, 0, n16), x[:n16], mu, is, k, mg, mgh, add)
					if !bitsEqual(v, w) {
						t.Errorf("%s add %v: vector gradInput differs from generic", name, add)
					}
				}
			}
		}
	}
}

// bitsEqual reports whether a and b hold the same float32 bits.
func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
