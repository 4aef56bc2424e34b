package nn

import (
	"math"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// checkUniform checks that values lie in [-bound, bound] and that their mean
// and variance are those of U(-bound, bound) (0 and bound²/3) within a few
// standard errors.
func checkUniform(t *testing.T, label string, v []float32, bound float64) {
	t.Helper()
	n := float64(len(v))
	var sum, sq float64
	maxAbs := 0.0
	for _, x := range v {
		f := float64(x)
		sum += f
		sq += f * f
		maxAbs = max(maxAbs, math.Abs(f))
	}
	if maxAbs > bound {
		t.Errorf("%s: |value| %g exceeds bound %g", label, maxAbs, bound)
	}
	if maxAbs < 0.99*bound {
		t.Errorf("%s: largest |value| %g does not approach bound %g", label, maxAbs, bound)
	}
	mean := sum / n
	variance := sq/n - mean*mean
	wantVar := bound * bound / 3
	// Standard errors: mean σ/√n; variance of U's x² gives 4/45·b⁴.
	seMean := math.Sqrt(wantVar / n)
	seVar := math.Sqrt(4.0 / 45 * math.Pow(bound, 4) / n)
	if math.Abs(mean) > 5*seMean {
		t.Errorf("%s: mean %g, want 0 ± %g", label, mean, 5*seMean)
	}
	if math.Abs(variance-wantVar) > 5*seVar {
		t.Errorf("%s: variance %g, want %g ± %g", label, variance, wantVar, 5*seVar)
	}
}

func TestLinearInitIsPyTorchDefault(t *testing.T) {
	SetSeed(3)
	l := Linear(1000, 200)
	bound := 1 / math.Sqrt(1000) // kaiming_uniform(a=√5): √3·√(2/6)/√fan_in
	checkUniform(t, "weight", l.Weight.Data(), bound)
	checkUniform(t, "bias", l.Bias.Data(), bound)
}

func TestKaimingUniformGain(t *testing.T) {
	w := tensor.Zeros(400, 250)
	KaimingUniform(tensor.NewRNG(5), w, 0) // plain ReLU gain √2
	checkUniform(t, "kaiming a=0", w.Data(), math.Sqrt(6.0/250))
	if FanIn([]int{8, 3, 5, 5}) != 75 {
		t.Errorf("FanIn of a conv weight = %d, want 75", FanIn([]int{8, 3, 5, 5}))
	}
	if msg := mustPanic(t, func() { FanIn([]int{3}) }); msg != "nn: fan in needs a weight with at least 2 dimensions, got shape [3]" {
		t.Errorf("panic %q", msg)
	}
}

func TestSetSeedMakesModelsReproducible(t *testing.T) {
	build := func(seed uint64) []*tensor.Tensor {
		SetSeed(seed)
		return Parameters(threeLinear())
	}
	a, b, c := build(11), build(11), build(12)
	for i := range a {
		if !slices.Equal(a[i].Data(), b[i].Data()) {
			t.Errorf("parameter %d differs under the same seed", i)
		}
	}
	if slices.Equal(a[0].Data(), c[0].Data()) {
		t.Error("different seeds gave the same weights")
	}
	// ResetParameters from an explicit generator gives the same result
	// whatever the package generator did.
	m1, m2 := threeLinear(), threeLinear()
	ResetParameters(m1, tensor.NewRNG(99))
	ResetParameters(m2, tensor.NewRNG(99))
	p1, p2 := Parameters(m1), Parameters(m2)
	for i := range p1 {
		if !slices.Equal(p1[i].Data(), p2[i].Data()) {
			t.Errorf("ResetParameters: parameter %d differs under the same RNG", i)
		}
	}
}
