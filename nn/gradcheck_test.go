package nn

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// TestComposedModelGradientsMatchFiniteDifferences checks backward through
// a whole model (Conv2d with stride and padding, BatchNorm2d in training,
// GELU, AvgPool2d, Flatten, Linear, BatchNorm1d, CrossEntropy) against
// central differences of the loss, for the input and every parameter. The
// per-layer gradients are checked against PyTorch in fixtures_test.go;
// this checks their composition, including batch statistics flowing back
// through BatchNorm. Smooth layers only, so the differences have no kinks.
func TestComposedModelGradientsMatchFiniteDifferences(t *testing.T) {
	m := Sequential(
		Conv2d(2, 3, 3, Stride(2), Padding(1)), BatchNorm2d(3), GELU(),
		AvgPool2d(2), Flatten(), Linear(12, 5), BatchNorm1d(5), GELU(), Linear(5, 4),
	)
	ResetParameters(m, tensor.NewRNG(7))
	rng := tensor.NewRNG(8)
	for _, p := range Parameters(m) { // move BatchNorm off its trivial 1/0
		if p.Dim() == 1 {
			rng.FillUniform(p, 0.5, 1.5)
		}
	}
	x := tensor.Randn(rng, 3, 2, 8, 8).SetRequiresGrad(true)
	target := []int{1, 3, 0}
	loss := func() float64 {
		var l float64
		tensor.NoGrad(func() { l = float64(CrossEntropyWith(m.Forward(x), target, ReduceSum).Item()) })
		return l
	}
	if err := CrossEntropyWith(m.Forward(x), target, ReduceSum).Backward(); err != nil {
		t.Fatal(err)
	}
	check := func(name string, p *tensor.Tensor) {
		grad := p.Grad().Data()
		scale := 0.0
		for _, g := range grad {
			scale = max(scale, math.Abs(float64(g)))
		}
		data := p.Data()
		diffQuot := func(i int, h float32) float64 {
			orig := data[i]
			data[i] = orig + h
			up := loss()
			data[i] = orig - h
			down := loss()
			data[i] = orig
			return (up - down) / float64(2*h)
		}
		worst := 0.0
		for i := range data {
			// Richardson extrapolation cancels the h² truncation error,
			// leaving float32 rounding of the loss (~1e-7·|loss|/h).
			const h = 2e-2
			fd := (4*diffQuot(i, h/2) - diffQuot(i, h)) / 3
			diff := math.Abs(fd - float64(grad[i]))
			worst = max(worst, diff/scale)
			if diff > 5e-4*scale+1e-4 {
				t.Errorf("%s[%d]: backward %.6g, finite difference %.6g", name, i, grad[i], fd)
			}
		}
		t.Logf("%s: largest |grad| %.3g, largest difference %.2g of it", name, scale, worst)
	}
	check("input", x)
	for _, p := range NamedParameters(m) {
		check(p.Name, p.Tensor)
	}
}
