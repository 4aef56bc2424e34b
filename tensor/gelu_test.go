package tensor

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestGELUMatchesErf compares GELU's chunked evaluation and its stored
// derivative with the float64 formulas over a wide range.
func TestGELUMatchesErf(t *testing.T) {
	const n = 20011
	x := Zeros(n)
	for i := range x.data {
		x.data[i] = float32(-9 + 18*float64(i)/n)
	}
	x.data[0] = float32(math.NaN())
	x.SetRequiresGrad(true)
	y := GELU(x)
	if err := y.BackwardWith(Full(1, n)); err != nil {
		t.Fatal(err)
	}
	if v := y.data[0]; v == v {
		t.Errorf("GELU(NaN) = %v", v)
	}
	for i := 1; i < n; i++ {
		f := float64(x.data[i])
		cdf := 0.5 * (1 + math.Erf(f/math.Sqrt2))
		want := f * cdf
		dwant := cdf + f*math.Exp(-f*f/2)/math.Sqrt(2*math.Pi)
		if d := math.Abs(float64(y.data[i]) - want); d > 3e-7*math.Max(1, math.Abs(f)) {
			t.Fatalf("GELU(%v) = %v, want %v", f, y.data[i], want)
		}
		if d := math.Abs(float64(x.grad.data[i]) - dwant); d > 1e-6 {
			t.Fatalf("GELU'(%v) = %v, want %v", f, x.grad.data[i], dwant)
		}
	}
}

// BenchmarkGELU times GELU forward and backward on one thread, per
// element of CPU time.
func BenchmarkGELU(b *testing.B) {
	x := randT(NewRNG(1), -4, 4, 1<<16)
	x.SetRequiresGrad(true)
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	g := Full(1, x.Len())
	cpu0 := processCPUTime()
	for b.Loop() {
		if err := GELU(x).BackwardWith(g); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPUTime()-cpu0).Nanoseconds())/float64(b.N*x.Len()), "cpu-ns/elem")
}

// TestGradGELUOfIntermediate checks GELU's backward where it multiplies
// its output's gradient buffer in place and hands it on (the input is an
// intermediate result nothing else has added to), and where the input's
// gradient already holds another use's contribution.
func TestGradGELUOfIntermediate(t *testing.T) {
	rng := NewRNG(21)
	x := randT(rng, -3, 3, 3, 50)
	gradCheck(t, "gelu_intermediate", defaultGC, func() *Tensor { return GELU(MulScalar(x, 2)) }, x)
	gradCheck(t, "gelu_intermediate_shared", defaultGC, func() *Tensor {
		h := MulScalar(x, 2)
		return Add(GELU(h), h)
	}, x)
}
