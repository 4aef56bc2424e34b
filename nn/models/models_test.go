package models

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// torchStateDicts reads the state-dict keys and print(model) output
// PyTorch gave for the same models (written by ../testdata/gen_fixtures.py).
func torchStateDicts(t *testing.T) (map[string][][3]any, map[string]string) {
	t.Helper()
	raw, err := os.ReadFile("../testdata/fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		StateDicts map[string][][3]any `json:"state_dicts"`
		Reprs      map[string]string   `json:"reprs"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return f.StateDicts, f.Reprs
}

func TestStateDictsMatchPyTorch(t *testing.T) {
	want, reprs := torchStateDicts(t)
	for name, m := range map[string]nn.Module{"mlp": MLP(), "mnist_net": MNISTNet()} {
		t.Run(name, func(t *testing.T) {
			if r := nn.Repr(m); r != reprs[name] {
				t.Errorf("Repr:\n%s\nPyTorch:\n%s", r, reprs[name])
			}
			got := nn.StateDict(m)
			w := want[name]
			if len(got) != len(w) {
				t.Fatalf("%d entries, PyTorch %d", len(got), len(w))
			}
			for i, e := range got {
				shape := fmt.Sprint(e.Tensor.Shape())
				wantShape := fmt.Sprint(w[i][1])
				if e.Name != w[i][0] || shape != wantShape || e.Dtype.String() != w[i][2] {
					t.Errorf("entry %d: %s %s %s, PyTorch %v %s %v", i, e.Name, shape, e.Dtype, w[i][0], wantShape, w[i][2])
				}
			}
		})
	}
}

func TestModelsRunForwardAndBackward(t *testing.T) {
	x := tensor.Rand(tensor.NewRNG(1), 3, 1, 28, 28)
	target := []int{3, 0, 9}
	for name, m := range map[string]nn.Module{"mlp": MLP(), "mnist_net": MNISTNet()} {
		t.Run(name, func(t *testing.T) {
			y := m.Forward(x)
			if !slices.Equal(y.Shape(), []int{3, 10}) {
				t.Fatalf("logits shape %v, want [3 10]", y.Shape())
			}
			if err := nn.CrossEntropy(y, target).Backward(); err != nil {
				t.Fatal(err)
			}
			for _, p := range nn.NamedParameters(m) {
				if p.Tensor.Grad() == nil {
					t.Errorf("%s has no gradient", p.Name)
				}
			}
			// Eval mode disables dropout: two forwards agree.
			nn.SetTrain(m, false)
			a := slices.Clone(m.Forward(x).Data())
			if !slices.Equal(a, m.Forward(x).Data()) {
				t.Error("eval forward is not deterministic")
			}
		})
	}
}

// TestMNISTNetStepReusesActivations checks that a training step of the
// CNN at batch 64 allocates little once warm: its activations, masks and
// gradient buffers (some 40 MB a step when each was new) are recycled.
func TestMNISTNetStepReusesActivations(t *testing.T) {
	m := MNISTNet()
	x := tensor.Rand(tensor.NewRNG(1), 64, 1, 28, 28)
	target := make([]int, 64)
	step := func() {
		for _, p := range nn.Parameters(m) {
			p.ZeroGrad()
		}
		if err := nn.CrossEntropy(m.Forward(x), target).Backward(); err != nil {
			t.Fatal(err)
		}
	}
	step()
	step()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const steps = 3
	for range steps {
		step()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / steps; per > 4<<20 {
		t.Errorf("a warm step allocates %d bytes, want under 4 MiB", per)
	}
}
