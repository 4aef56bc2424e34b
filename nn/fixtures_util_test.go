package nn

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/internal/testfixture"
	"github.com/gotrain/gotrain/tensor"
)

// fixtures mirrors testdata/fixtures.json, written by
// testdata/gen_fixtures.py with PyTorch in float64.
type fixtures struct {
	Cases      []fixCase           `json:"cases"`
	StateDicts map[string][][3]any `json:"state_dicts"`
	Reprs      map[string]string   `json:"reprs"`
}

type fixTensor = testfixture.Tensor

type fixCase struct {
	Name       string               `json:"name"`
	Train      bool                 `json:"train"`
	State      map[string]fixTensor `json:"state"`
	Input      fixTensor            `json:"input"`
	GradOutput *fixTensor           `json:"grad_output"`
	Target     []int                `json:"target"`
	Output     fixTensor            `json:"output"`
	GradInput  fixTensor            `json:"grad_input"`
	ParamGrads map[string]fixTensor `json:"param_grads"`
	StateAfter map[string]fixTensor `json:"state_after"`
}

// loadFixtures reads the file once for all the tests that use it.
var loadFixtures = sync.OnceValues(func() (*fixtures, error) {
	return testfixture.Read[fixtures]("fixtures.json")
})

func mustFixtures(t *testing.T) *fixtures {
	t.Helper()
	f, err := loadFixtures()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tensor32 converts a fixture (whose values are exact float32s) to a tensor.
func tensor32(f fixTensor) *tensor.Tensor { return tensor.New(f.Float32(), f.Shape...) }

// keyShapeDtype is one state-dict entry as PyTorch printed it.
type keyShapeDtype struct {
	Name  string
	Shape []int
	Dtype string
}

func (f *fixtures) stateDict(t *testing.T, model string) []keyShapeDtype {
	t.Helper()
	raw, ok := f.StateDicts[model]
	if !ok {
		t.Fatalf("fixtures have no state dict %q", model)
	}
	out := make([]keyShapeDtype, len(raw))
	for i, e := range raw {
		var shape []int
		for _, d := range e[1].([]any) {
			shape = append(shape, int(d.(float64)))
		}
		out[i] = keyShapeDtype{Name: e[0].(string), Shape: shape, Dtype: e[2].(string)}
	}
	return out
}

// checkStateDictKeys compares a model's StateDict (names, order, shapes,
// dtypes) with PyTorch's.
func checkStateDictKeys(t *testing.T, m Module, want []keyShapeDtype) {
	t.Helper()
	got := StateDict(m)
	if len(got) != len(want) {
		t.Errorf("state dict has %d entries, PyTorch %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.Name != w.Name || fmt.Sprint(g.Tensor.Shape()) != fmt.Sprint(shapeOrEmpty(w.Shape)) || g.Dtype.String() != w.Dtype {
			t.Errorf("entry %d: got %s %v %s, PyTorch %s %v %s", i, g.Name, g.Tensor.Shape(), g.Dtype, w.Name, w.Shape, w.Dtype)
		}
	}
}

func shapeOrEmpty(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// closeTo reports elements of got that differ from the float64 reference
// want by more than rtol relative to max(|want[i]|, max|want|): float32
// rounding is relative to the magnitudes summed, not to each result.
func closeTo(t *testing.T, label string, got *tensor.Tensor, want fixTensor, rtol float64) {
	t.Helper()
	if fmt.Sprint(got.Shape()) != fmt.Sprint(shapeOrEmpty(want.Shape)) {
		t.Errorf("%s: shape %v, want %v", label, got.Shape(), want.Shape)
		return
	}
	scale := 0.0
	for _, v := range want.Data {
		scale = max(scale, math.Abs(v))
	}
	bad := 0
	for i, w := range want.Data {
		g := float64(got.Data()[i])
		if math.Abs(g-w) > rtol*max(math.Abs(w), scale) || math.IsNaN(g) {
			if bad < 3 {
				t.Errorf("%s[%d] = %.8g, PyTorch %.8g", label, i, g, w)
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d elements differ", label, bad, len(want.Data))
	}
}
