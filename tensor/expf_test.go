package tensor

import (
	"math"
	"testing"
)

// TestExpf checks the float32 exponential against math.Exp over the range
// softmax uses, to a few ulp, and its edge values.
func TestExpf(t *testing.T) {
	worst := 0.0
	for i := 0; i <= 200000; i++ {
		x := float32(-87 + 175*float64(i)/200000)
		got := float64(expf(x))
		want := math.Exp(float64(x))
		rel := math.Abs(got-want) / want
		worst = math.Max(worst, rel)
	}
	if worst > 3e-7 {
		t.Errorf("expf: worst relative error %.3g, want ≤ 3e-7", worst)
	}
	if v := expf(float32(math.Inf(-1))); v != 0 {
		t.Errorf("expf(-Inf) = %v, want 0", v)
	}
	if v := expf(float32(math.Inf(1))); !math.IsInf(float64(v), 1) {
		t.Errorf("expf(+Inf) = %v, want +Inf", v)
	}
	if v := expf(float32(math.NaN())); v == v {
		t.Errorf("expf(NaN) = %v, want NaN", v)
	}
	if v := expf(0); v != 1 {
		t.Errorf("expf(0) = %v, want 1", v)
	}
}

// TestErff checks the float32 erf against math.Erf.
func TestErff(t *testing.T) {
	worst, at := 0.0, float32(0)
	for i := 0; i <= 400000; i++ {
		x := float32(-6 + 12*float64(i)/400000)
		if d := math.Abs(float64(erff(x)) - math.Erf(float64(x))); d > worst {
			worst, at = d, x
		}
	}
	if worst > 2.5e-7 {
		t.Errorf("erff: worst absolute error %.3g at %v, want ≤ 2.5e-7", worst, at)
	}
	if v := erff(float32(math.NaN())); v == v {
		t.Errorf("erff(NaN) = %v", v)
	}
	if erff(float32(math.Inf(-1))) != -1 || erff(float32(math.Inf(1))) != 1 {
		t.Error("erff(±Inf) is not ±1")
	}
}

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
