package nn

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// TestSequentialFusionMatchesLayerByLayer checks that Sequential's fused
// runs (Conv2d+ReLU, Conv2d+ReLU+MaxPool2d(2)) give bit for bit the output
// and gradients of running the same children one by one, and that runs
// which must not be fused (other pooling, unbatched input) still work.
func TestSequentialFusionMatchesLayerByLayer(t *testing.T) {
	models := map[string]func() *SequentialLayer{
		"conv-relu-conv-relu-pool": func() *SequentialLayer {
			return Sequential(Conv2d(2, 4, 3), ReLU(), Conv2d(4, 6, 3, Padding(1)), ReLU(), MaxPool2d(2), Flatten(), Linear(6*4*4, 3))
		},
		"conv-relu-pool3": func() *SequentialLayer {
			return Sequential(Conv2d(2, 4, 3, Stride(2)), ReLU(), MaxPool2d(3, Stride(2)), Flatten())
		},
		"conv-relu-last": func() *SequentialLayer { return Sequential(Conv2d(2, 3, 2), ReLU()) },
		"conv-relu-tiny": func() *SequentialLayer {
			// The 1×1 convolution output is too small to pool: the pool
			// layer itself reports it.
			return Sequential(Conv2d(2, 3, 10), ReLU())
		},
	}
	for name, build := range models {
		t.Run(name, func(t *testing.T) {
			SetSeed(5)
			m := build()
			x := tensor.Rand(tensor.NewRNG(3), 3, 2, 10, 10)
			run := func(forward func(*tensor.Tensor) *tensor.Tensor) (out []float32, grads [][]float32) {
				for _, p := range Parameters(m) {
					p.SetGrad(nil)
				}
				y := forward(x)
				if err := tensor.Sum(tensor.Mul(y, y), false).Backward(); err != nil {
					t.Fatal(err)
				}
				for _, p := range Parameters(m) {
					grads = append(grads, p.Grad().Clone().Data())
				}
				return slices.Clone(y.Data()), grads
			}
			out, grads := run(m.Forward)
			wantOut, wantGrads := run(func(x *tensor.Tensor) *tensor.Tensor {
				for i := 0; i < m.Len(); i++ {
					x = m.At(i).Forward(x)
				}
				return x
			})
			if !bitsEqual(out, wantOut) {
				t.Fatalf("output %v, layer by layer %v", out, wantOut)
			}
			for i := range grads {
				if !bitsEqual(grads[i], wantGrads[i]) {
					t.Fatalf("gradient %d differs from layer by layer", i)
				}
			}
			// Unbatched input is not fused and still works.
			if name == "conv-relu-last" {
				y := m.Forward(tensor.Rand(tensor.NewRNG(4), 2, 10, 10))
				if !slices.Equal(y.Shape(), []int{3, 9, 9}) {
					t.Fatalf("unbatched output %v", y.Shape())
				}
			}
		})
	}
	// Shape mistakes are reported by the layer, fused or not.
	defer func() {
		if r := recover(); fmt.Sprint(r) != "nn: Conv2d(2→4, kernel 3): input [1 3 8 8] does not match in_channels 2" {
			t.Fatalf("panic %v", r)
		}
	}()
	Sequential(Conv2d(2, 4, 3), ReLU()).Forward(tensor.Zeros(1, 3, 8, 8))
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestSequentialFreesOnlyIntermediates runs several training steps through
// Sequentials whose intermediates are recycled, checking against the same
// children run one by one (nothing recycled) that outputs and gradients are
// bit for bit equal, that results and inputs the caller holds are never
// overwritten by later steps, and that storage shared with the input or
// the result (Flatten first or last) is never recycled.
func TestSequentialFreesOnlyIntermediates(t *testing.T) {
	models := map[string]func() *SequentialLayer{
		"cnn": func() *SequentialLayer {
			return Sequential(Conv2d(1, 8, 3), ReLU(), Conv2d(8, 16, 3), ReLU(), MaxPool2d(2), Dropout(0.25),
				Flatten(), Linear(16*4*4, 32), ReLU(), Dropout(0.5), Linear(32, 10))
		},
		"flatten-first": func() *SequentialLayer {
			return Sequential(Flatten(), Linear(144, 64), ReLU(), Linear(64, 64), ReLU(), Linear(64, 10))
		},
		"flatten-last": func() *SequentialLayer {
			return Sequential(Conv2d(1, 8, 3), ReLU(), Conv2d(8, 8, 3), ReLU(), Flatten())
		},
		"unbatched": func() *SequentialLayer {
			return Sequential(Conv2d(1, 8, 3), ReLU(), MaxPool2d(2), Conv2d(8, 8, 3), ReLU(), FlattenFrom(0), Linear(72, 10))
		},
		"dropout-eval-last": func() *SequentialLayer {
			m := Sequential(Flatten(), Linear(144, 64), ReLU(), Dropout(0.5))
			SetTrain(m, false)
			return m
		},
	}
	for name, build := range models {
		t.Run(name, func(t *testing.T) {
			SetSeed(11)
			m := build()
			SetSeed(11)
			ref := build()
			if name == "dropout-eval-last" {
				SetTrain(ref, false)
			}
			step := func(m *SequentialLayer, forward func(*tensor.Tensor) *tensor.Tensor, x *tensor.Tensor) (*tensor.Tensor, [][]float32) {
				for _, p := range Parameters(m) {
					p.SetGrad(nil)
				}
				y := forward(x)
				if err := tensor.Sum(tensor.Mul(y, y), false).Backward(); err != nil {
					t.Fatal(err)
				}
				var grads [][]float32
				for _, p := range Parameters(m) {
					grads = append(grads, p.Grad().Clone().Data())
				}
				return y, grads
			}
			var held, heldX []*tensor.Tensor
			var heldData, heldXData [][]float32
			for s := 0; s < 4; s++ {
				x := tensor.Rand(tensor.NewRNG(uint64(s)), 16, 1, 12, 12)
				if name == "unbatched" {
					x = tensor.Rand(tensor.NewRNG(uint64(s)), 1, 12, 12)
				}
				xData := slices.Clone(x.Data())
				y, grads := step(m, m.Forward, x)
				wantY, wantGrads := step(ref, func(x *tensor.Tensor) *tensor.Tensor {
					for i := 0; i < ref.Len(); i++ {
						x = ref.At(i).Forward(x)
					}
					return x
				}, x)
				if !bitsEqual(y.Data(), wantY.Data()) {
					t.Fatalf("step %d: output differs from layer by layer", s)
				}
				for i := range grads {
					if !bitsEqual(grads[i], wantGrads[i]) {
						t.Fatalf("step %d: gradient %d differs from layer by layer", s, i)
					}
				}
				held, heldData = append(held, y), append(heldData, slices.Clone(y.Data()))
				heldX, heldXData = append(heldX, x), append(heldXData, xData)
				for i := range held {
					if !bitsEqual(held[i].Data(), heldData[i]) {
						t.Fatalf("step %d: result of step %d was overwritten", s, i)
					}
					if !bitsEqual(heldX[i].Data(), heldXData[i]) {
						t.Fatalf("step %d: input of step %d was overwritten", s, i)
					}
				}
			}
		})
	}
}
