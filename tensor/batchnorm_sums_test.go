package tensor

import (
	"math"
	"testing"
)

// TestBatchNormSums checks BatchNorm's interleaved float64 channel sums
// against single-chain sums, on lengths around the unrolling and a long
// row whose terms vary in size.
func TestBatchNormSums(t *testing.T) {
	rng := NewRNG(9)
	for _, n := range []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 1023} {
		g := randT(rng, -3, 3, max(n, 1)).Data()[:n]
		h := randT(rng, -2, 2, max(n, 1)).Data()[:n]
		var sum, sq, dot float64
		mu := 0.25
		for j := range g {
			sum += float64(g[j])
			d := float64(g[j]) - mu
			sq += d * d
			dot += float64(g[j]) * float64(h[j])
		}
		s2, d2 := sumDot64(g, h)
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"sum64", sum64(g), sum}, {"sqDev64", sqDev64(g, mu), sq},
			{"sumDot64 sum", s2, sum}, {"sumDot64 dot", d2, dot},
		} {
			if math.Abs(c.got-c.want) > 1e-12*(1+math.Abs(c.want)) {
				t.Fatalf("n %d: %s = %v, want %v", n, c.name, c.got, c.want)
			}
		}
	}
}
