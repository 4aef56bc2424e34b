package nn

import (
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// fixtureCase builds the gotrain twin of one PyTorch fixture layer and,
// for loss cases, applies the same loss.
type fixtureCase struct {
	build func() Module
	loss  func(y *tensor.Tensor, target []int) *tensor.Tensor
}

func smallSeq() Module { return Sequential(Linear(6, 5), ReLU(), Linear(5, 4)) }

// fixtureCases names every case of testdata/fixtures.json.
var fixtureCases = map[string]fixtureCase{
	"linear":                 {build: func() Module { return Linear(5, 3) }},
	"linear_nobias_3d":       {build: func() Module { return Linear(5, 3, NoBias()) }},
	"conv_s2p1":              {build: func() Module { return Conv2d(3, 4, 3, Stride(2), Padding(1)) }},
	"conv_nobias":            {build: func() Module { return Conv2d(2, 3, 2, NoBias()) }},
	"maxpool2":               {build: func() Module { return MaxPool2d(2) }},
	"maxpool3_s2p1":          {build: func() Module { return MaxPool2d(3, Stride(2), Padding(1)) }},
	"avgpool2":               {build: func() Module { return AvgPool2d(2) }},
	"avgpool3_s2p1":          {build: func() Module { return AvgPool2d(3, Stride(2), Padding(1)) }},
	"bn1d_train":             {build: func() Module { return BatchNorm1d(4) }},
	"bn1d_train_3d":          {build: func() Module { return BatchNorm1d(3) }},
	"bn1d_eval":              {build: func() Module { return BatchNorm1d(4) }},
	"bn2d_train":             {build: func() Module { return BatchNorm2d(3) }},
	"bn2d_eval":              {build: func() Module { return BatchNorm2d(3) }},
	"relu":                   {build: func() Module { return ReLU() }},
	"gelu":                   {build: func() Module { return GELU() }},
	"logsoftmax1":            {build: func() Module { return LogSoftmax(1) }},
	"logsoftmax0":            {build: func() Module { return LogSoftmax(0) }},
	"softmax1":               {build: func() Module { return Softmax(1) }},
	"flatten":                {build: func() Module { return Flatten() }},
	"seq_cross_entropy_mean": {build: smallSeq, loss: CrossEntropy},
	"seq_cross_entropy_sum": {build: smallSeq, loss: func(y *tensor.Tensor, t []int) *tensor.Tensor {
		return CrossEntropyWith(y, t, ReduceSum)
	}},
	"seq_nll_mean":           {build: func() Module { return Sequential(Linear(6, 4), LogSoftmax(1)) }, loss: NLL},
	"conv_dilation2_groups2": {build: func() Module { return Conv2d(4, 6, 3, Padding(2), Dilation(2), Groups(2)) }},
	"conv_depthwise_s2":      {build: func() Module { return Conv2d(3, 3, 3, Stride(2), Padding(1), Groups(3), NoBias()) }},
}

// TestLayersMatchPyTorch loads each fixture's weights with LoadStateDict,
// runs forward and backward, and compares the output, the input gradient,
// every parameter gradient and the state afterwards (BatchNorm's running
// statistics and batch count) with PyTorch's float64 results.
func TestLayersMatchPyTorch(t *testing.T) {
	f := mustFixtures(t)
	if len(f.Cases) != len(fixtureCases) {
		t.Errorf("fixtures have %d cases, the test knows %d", len(f.Cases), len(fixtureCases))
	}
	for _, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			fc, ok := fixtureCases[c.Name]
			if !ok {
				t.Fatalf("no gotrain twin for fixture case %q", c.Name)
			}
			m := fc.build()
			sd := make(map[string]*tensor.Tensor, len(c.State))
			for k, v := range c.State {
				sd[k] = tensor32(v)
			}
			if err := LoadStateDict(m, sd, true); err != nil {
				t.Fatal(err)
			}
			SetTrain(m, c.Train)
			x := tensor32(c.Input).SetRequiresGrad(true)
			y := m.Forward(x)
			if fc.loss != nil {
				y = fc.loss(y, c.Target)
				if err := y.Backward(); err != nil {
					t.Fatal(err)
				}
			} else if err := y.BackwardWith(tensor32(*c.GradOutput)); err != nil {
				t.Fatal(err)
			}
			const rtol = 1e-5
			closeTo(t, "output", y, c.Output, rtol)
			closeTo(t, "input grad", x.Grad(), c.GradInput, rtol)
			params := NamedParameters(m)
			if len(params) != len(c.ParamGrads) {
				t.Errorf("%d parameters, PyTorch %d", len(params), len(c.ParamGrads))
			}
			for _, p := range params {
				want, ok := c.ParamGrads[p.Name]
				if !ok {
					t.Errorf("parameter %s unknown to PyTorch", p.Name)
					continue
				}
				closeTo(t, p.Name+" grad", p.Tensor.Grad(), want, rtol)
			}
			for _, e := range StateDict(m) {
				closeTo(t, e.Name+" after", e.Tensor, c.StateAfter[e.Name], rtol)
			}
		})
	}
}
