package tensor

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/testfixture"
)

// fixture is one case written by testdata/gen_fixtures.py with PyTorch 1.13.
type fixture struct {
	Params struct {
		Stride    [2]int  `json:"stride"`
		Padding   [2]int  `json:"padding"`
		Dilation  [2]int  `json:"dilation"`
		Groups    int     `json:"groups"`
		Kernel    [2]int  `json:"kernel"`
		Training  bool    `json:"training"`
		Momentum  float32 `json:"momentum"`
		Eps       float32 `json:"eps"`
		Dim       int     `json:"dim"`
		Reduction string  `json:"reduction"`
		Target    []int   `json:"target"`
	} `json:"params"`
	Inputs map[string]fixtureTensor `json:"inputs"`
	Output fixtureTensor            `json:"output"`
	Gout   fixtureTensor            `json:"gout"`
	Grads  map[string]fixtureTensor `json:"grads"`

	RunningMeanBefore *fixtureTensor `json:"running_mean_before"`
	RunningVarBefore  *fixtureTensor `json:"running_var_before"`
	RunningMeanAfter  *fixtureTensor `json:"running_mean_after"`
	RunningVarAfter   *fixtureTensor `json:"running_var_after"`
}

type fixtureTensor = testfixture.Tensor

// fromFixture makes a tensor of a fixture's values.
func fromFixture(f fixtureTensor) *Tensor { return New(f.Float32(), f.Shape...) }

// closeTo checks got against PyTorch's values with a relative tolerance,
// measured against the largest reference magnitude for entries near zero.
func closeTo(t *testing.T, what string, got *Tensor, want fixtureTensor, rtol float64) {
	t.Helper()
	if !sameShape(got.shape, want.Shape) {
		t.Errorf("%s: shape %v, PyTorch %v", what, got.shape, want.Shape)
		return
	}
	var scale float64
	for _, w := range want.Data {
		scale = math.Max(scale, math.Abs(w))
	}
	bad := 0
	for i, w := range want.Data {
		g := float64(got.data[i])
		if math.Abs(g-w) > rtol*(math.Abs(w)+scale*0.1) || math.IsNaN(g) {
			if bad < 3 {
				t.Errorf("%s[%d] = %.8g, PyTorch %.8g", what, i, g, w)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(want.Data))
	}
}

func TestAgainstPyTorch(t *testing.T) {
	cases := []struct {
		name string
		fn   caseFunc
	}{
		{"conv2d_s2_p1", func(_ *testing.T, f *fixture, in map[string]*Tensor) *Tensor {
			return Conv2d(in["x"], in["w"], in["b"], f.Params.Stride, f.Params.Padding)
		}},
		{"conv2d_dilation2_p2", convWith},
		{"conv2d_groups2_s2_d3x2", convWith},
		{"conv2d_depthwise_p1", convWith},
		{"max_pool2d_k3_s2_p1", pool(MaxPool2d)},
		{"max_pool2d_k2", pool(MaxPool2d)},
		{"avg_pool2d_k3_s2_p1", pool(AvgPool2d)},
		{"batch_norm_2d_train", batchNorm},
		{"batch_norm_2d_eval", batchNorm},
		{"batch_norm_1d_train", batchNorm},
		{"batch_norm_1d_eval", batchNorm},
		{"gelu", func(_ *testing.T, _ *fixture, in map[string]*Tensor) *Tensor { return GELU(in["x"]) }},
		{"log_softmax_dim0", func(_ *testing.T, f *fixture, in map[string]*Tensor) *Tensor {
			return LogSoftmax(in["x"], f.Params.Dim)
		}},
		{"log_softmax_dim1", func(_ *testing.T, f *fixture, in map[string]*Tensor) *Tensor {
			return LogSoftmax(in["x"], f.Params.Dim)
		}},
		{"linear", func(_ *testing.T, _ *fixture, in map[string]*Tensor) *Tensor {
			return Linear(in["x"], in["w"], in["b"])
		}},
		{"cross_entropy_mean", crossEntropy},
		{"cross_entropy_sum", crossEntropy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := testfixture.Load[fixture](t, c.name+".json")
			in := make(map[string]*Tensor)
			for k, v := range f.Inputs {
				in[k] = fromFixture(v).SetRequiresGrad(true)
			}
			out := c.fn(t, f, in)
			closeTo(t, "output", out, f.Output, 1e-5)
			if err := out.BackwardWith(fromFixture(f.Gout)); err != nil {
				t.Fatal(err)
			}
			for k, want := range f.Grads {
				if in[k].Grad() == nil {
					t.Errorf("no gradient for %s", k)
					continue
				}
				closeTo(t, "grad "+k, in[k].Grad(), want, 1e-5)
			}
		})
	}
}

// caseFunc runs one fixture's op on its inputs.
type caseFunc func(t *testing.T, f *fixture, in map[string]*Tensor) *Tensor

func pool(op func(x *Tensor, kernel, stride, padding [2]int) *Tensor) caseFunc {
	return func(_ *testing.T, f *fixture, in map[string]*Tensor) *Tensor {
		return op(in["x"], f.Params.Kernel, f.Params.Stride, f.Params.Padding)
	}
}

func crossEntropy(_ *testing.T, f *fixture, in map[string]*Tensor) *Tensor {
	return CrossEntropy(in["x"], f.Params.Target, f.Params.Reduction)
}

// batchNorm runs the fixture's batch norm and checks the updated running
// statistics too (PyTorch updates them in place).
func batchNorm(t *testing.T, f *fixture, in map[string]*Tensor) *Tensor {
	rm, rv := fromFixture(*f.RunningMeanBefore), fromFixture(*f.RunningVarBefore)
	out := BatchNorm(in["x"], in["w"], in["b"], rm, rv, f.Params.Training, f.Params.Momentum, f.Params.Eps)
	closeTo(t, "running mean", rm, *f.RunningMeanAfter, 1e-5)
	closeTo(t, "running var", rv, *f.RunningVarAfter, 1e-5)
	return out
}

// convWith runs a Conv2dWith case with the fixture's dilation and groups.
func convWith(_ *testing.T, f *fixture, in map[string]*Tensor) *Tensor {
	return Conv2dWith(in["x"], in["w"], in["b"], ConvOptions{
		Stride: f.Params.Stride, Padding: f.Params.Padding, Dilation: f.Params.Dilation, Groups: f.Params.Groups,
	})
}
