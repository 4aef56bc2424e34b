package nn

import (
	"slices"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// TestLinearGELUMatchesLayers checks nn.LinearGELU against the two layers
// run one after the other, exact and tanh GELU: same output and weight
// gradient bit for bit on one thread, and the layer's own panic for a bad
// input width.
func TestLinearGELUMatchesLayers(t *testing.T) {
	for _, act := range []*GELULayer{GELU(), GELUTanh()} {
		t.Run(act.String(), func(t *testing.T) {
			SetSeed(3)
			lin := Linear(12, 30)
			x := tensor.Rand(tensor.NewRNG(4), 2, 5, 12)
			run := func(f func() *tensor.Tensor) (out, gw []float32) {
				lin.Weight.SetGrad(nil)
				lin.Bias.SetGrad(nil)
				y := f()
				if err := tensor.Sum(tensor.Mul(y, y), false).Backward(); err != nil {
					t.Fatal(err)
				}
				return slices.Clone(y.Data()), slices.Clone(lin.Weight.Grad().Data())
			}
			out, gw := run(func() *tensor.Tensor { return LinearGELU(lin, act, x) })
			wantOut, wantGW := run(func() *tensor.Tensor { return act.Forward(lin.Forward(x)) })
			if !slices.Equal(out, wantOut) || !slices.Equal(gw, wantGW) {
				t.Fatalf("LinearGELU differs from %s after Linear", act)
			}
		})
	}
	defer func() {
		if r := recover(); r != "nn: Linear(12→30): input [2 7] does not match in_features 12" {
			t.Fatalf("panic %v", r)
		}
	}()
	SetSeed(3)
	LinearGELU(Linear(12, 30), GELU(), tensor.Zeros(2, 7))
}
