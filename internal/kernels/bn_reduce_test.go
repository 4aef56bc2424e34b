package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBNReduce checks BatchNorm's channel sums against single-chain
// float64 sums, and the vector loops this machine runs against the
// generic ones bit for bit, on lengths around the 16-value blocks and
// values of mixed magnitude.
func TestBNReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const mu = 0.375
	for _, n := range []int{0, 1, 7, 15, 16, 17, 31, 32, 33, 48, 100, 1023, 3136} {
		g, h := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i] = float32(rng.NormFloat64() * math.Exp(4*rng.Float64()))
			h[i] = float32(rng.NormFloat64())
		}
		var sum, sq, dot float64
		for j := range g {
			sum += float64(g[j])
			d := float64(g[j]) - mu
			sq += d * d
			dot += float64(g[j]) * float64(h[j])
		}
		s, d := BNSumDot64(g, h)
		var ssum, ssq float64
		for _, v := range g {
			e := float64(v) - mu
			ssum += e
			ssq += e * e
		}
		shs, shq := BNShiftSums64(g, mu)
		scale := 1.0
		for _, v := range g {
			scale += math.Abs(float64(v)) * (1 + math.Abs(float64(v)))
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"BNSum64", BNSum64(g), sum}, {"BNSqDev64", BNSqDev64(g, mu), sq}, {"BNSumDot64 sum", s, sum}, {"BNSumDot64 dot", d, dot},
			{"BNShiftSums64 sum", shs, ssum}, {"BNShiftSums64 sq", shq, ssq}} {
			if math.Abs(c.got-c.want) > 1e-13*scale {
				t.Fatalf("n %d: %s = %v, want %v", n, c.name, c.got, c.want)
			}
		}
		n16 := n &^ 15
		if n16 == 0 {
			continue
		}
		for _, impl := range allBNReduces() {
			gs, gd := bnReduceGeneric.sumDot(g[:n16], h[:n16])
			vs, vd := impl.sumDot(g[:n16], h[:n16])
			gss, gsq := bnReduceGeneric.shiftSums(g[:n16], mu)
			vss, vsq := impl.shiftSums(g[:n16], mu)
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"sum", impl.sum(g[:n16]), bnReduceGeneric.sum(g[:n16])},
				{"sqDev", impl.sqDev(g[:n16], mu), bnReduceGeneric.sqDev(g[:n16], mu)},
				{"sumDot sum", vs, gs}, {"sumDot dot", vd, gd},
				{"shiftSums sum", vss, gss}, {"shiftSums sq", vsq, gsq},
			} {
				if math.Float64bits(c.got) != math.Float64bits(c.want) {
					t.Errorf("n %d: vector %s = %v, generic %v", n, c.name, c.got, c.want)
				}
			}
		}
	}
}
