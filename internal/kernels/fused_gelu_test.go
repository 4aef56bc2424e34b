package kernels

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGELUGradBiasMatchesUnfused checks the fused GELU backward and bias
// reduction against Mul then SumRows, bit for bit, on widths with vector
// tails, with and without a bias gradient, on every vector path.
func TestGELUGradBiasMatchesUnfused(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	defer func(v *vecImpl) { vec = v }(vec)
	for _, impl := range vecImpls() {
		vec = impl
		t.Run(impl.name, func(t *testing.T) {
			for _, n := range []int{1, 7, 16, 23, 64, 129} {
				for _, rows := range []int{1, 3, 17} {
					g := make([]float32, rows*n)
					d := make([]float32, rows*n)
					gb := make([]float32, n)
					for i := range g {
						g[i], d[i] = rng.Float32()*4-2, rng.Float32()*1.2-0.1
					}
					for i := range gb {
						gb[i] = rng.Float32() - 0.5
					}
					wantG, wantB := slices.Clone(g), slices.Clone(gb)
					Mul(wantG, d)
					SumRows(wantB, wantG, rows)
					gotG, gotB := slices.Clone(g), slices.Clone(gb)
					GELUGradBias(gotG, d, gotB, rows)
					if !slices.Equal(gotG, wantG) || !slices.Equal(gotB, wantB) {
						t.Fatalf("n=%d rows=%d: fused differs from Mul+SumRows", n, rows)
					}
					gotG = slices.Clone(g)
					GELUGradBias(gotG, d, nil, rows)
					if !slices.Equal(gotG, wantG) {
						t.Fatalf("n=%d rows=%d, no bias: product differs from Mul", n, rows)
					}
				}
			}
			GELUGradBias(nil, nil, nil, 0) // nothing to do
		})
	}
}
