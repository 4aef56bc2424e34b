package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSoftmaxRowKernels checks ExpShiftSum, MaxOf, SubMul and Dot (vector
// code and Go tail) against float64 versions of their reference loops at
// every length up to 41 and at 64 and 131, and ExpShiftSum's edge cases
// (±Inf, NaN, the underflow bound) against Exp.
func TestSoftmaxRowKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vec := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	lengths := []int{64, 131}
	for n := 0; n <= 41; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		x, y := vec(n, 3), vec(n, 1)
		wmax := math.Inf(-1)
		var wdot, abs float64
		for i, v := range x {
			wmax = math.Max(wmax, float64(v))
			wdot += float64(v) * float64(y[i])
			abs += math.Abs(float64(v) * float64(y[i]))
		}
		if got := MaxOf(x); float64(got) != wmax {
			t.Fatalf("n=%d: MaxOf = %v, want %v", n, got, wmax)
		}
		if got := Dot(x, y); math.Abs(float64(got)-wdot) > 1e-6*math.Max(1, abs) {
			t.Fatalf("n=%d: Dot = %v, want %v", n, got, wdot)
		}

		m := float32(wmax)
		if n == 0 {
			m = 0
		}
		dst := make([]float32, n)
		sum := ExpShiftSum(dst, x, m)
		var wsum float64
		for i, v := range x {
			want := math.Exp(float64(v - m)) // the shift is rounded to float32 first
			wsum += want
			if math.Abs(float64(dst[i])-want) > 3e-7*want {
				t.Fatalf("n=%d: ExpShiftSum[%d] = %v, want %v", n, i, dst[i], want)
			}
		}
		if math.Abs(float64(sum)-wsum) > 1e-6*math.Max(1, wsum) {
			t.Fatalf("n=%d: ExpShiftSum = %v, want %v", n, sum, wsum)
		}

		dp := vec(n, 1)
		dp0 := append([]float32(nil), dp...)
		SubMul(dp, dst, 0.25)
		for i := range dp {
			want := float64(dst[i]) * (float64(dp0[i]) - 0.25)
			if math.Abs(float64(dp[i])-want) > 1e-7*math.Max(1, math.Abs(want)) {
				t.Fatalf("n=%d: SubMul[%d] = %v, want %v", n, i, dp[i], want)
			}
		}
	}

	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	edge := []float32{0, -1, 1, inf, -inf, nan, 88, -87, -90, 200, -200, 1e-8, 3, -3, nan, inf, 5}
	for _, m := range []float32{0, 2, -2} {
		got := make([]float32, len(edge))
		ExpShiftSum(got, edge, m)
		want := make([]float32, len(edge))
		for i, v := range edge {
			want[i] = v - m
		}
		Exp(want, want)
		for i := range edge {
			if !(got[i] == want[i] || got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("ExpShiftSum(%v − %v) = %v, Exp gives %v", edge[i], m, got[i], want[i])
			}
		}
	}
}
