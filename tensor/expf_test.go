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
