package nn

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// customNet is the twin of gen_fixtures.py's Custom module.
type customNet struct {
	Base
	fc1  *LinearLayer
	bn   *BatchNormLayer
	head *SequentialLayer
}

func newCustomNet() *customNet {
	m := &customNet{
		fc1:  Linear(10, 8),
		bn:   BatchNorm1d(8),
		head: Sequential(ReLU(), Linear(8, 4, NoBias()), Linear(4, 2)),
	}
	m.Register("fc1", m.fc1)
	m.Register("bn", m.bn)
	m.Register("head", m.head)
	return m
}

func (m *customNet) Forward(x *tensor.Tensor) *tensor.Tensor {
	return m.head.Forward(m.bn.Forward(m.fc1.Forward(x)))
}

func TestStateDictKeysMatchPyTorch(t *testing.T) {
	f := mustFixtures(t)
	t.Run("custom", func(t *testing.T) { checkStateDictKeys(t, newCustomNet(), f.stateDict(t, "custom")) })
	t.Run("bn_net", func(t *testing.T) {
		m := Sequential(Conv2d(1, 4, 3, Padding(1)), BatchNorm2d(4), ReLU(), MaxPool2d(2), Flatten(),
			Linear(4*14*14, 16), BatchNorm1d(16), ReLU(), Linear(16, 10))
		checkStateDictKeys(t, m, f.stateDict(t, "bn_net"))
		if got := Repr(m); got != f.Reprs["bn_net"] {
			t.Errorf("Repr:\n%s\nPyTorch:\n%s", got, f.Reprs["bn_net"])
		}
		if got := names(NamedBuffers(m)); !slices.Equal(got, []string{
			"1.running_mean", "1.running_var", "1.num_batches_tracked",
			"6.running_mean", "6.running_var", "6.num_batches_tracked"}) {
			t.Errorf("NamedBuffers %v", got)
		}
		if got := len(NamedParameters(m)); got != 10 {
			t.Errorf("%d parameters, want 10", got)
		}
		y := m.Forward(tensor.Zeros(2, 1, 28, 28))
		if !slices.Equal(y.Shape(), []int{2, 10}) {
			t.Errorf("output shape %v", y.Shape())
		}
	})
}

func TestConvAndPoolShapeMistakesPanic(t *testing.T) {
	cases := map[string]struct {
		f    func()
		want string
	}{
		"conv channels": {func() { Conv2d(1, 32, 3).Forward(tensor.Zeros(64, 3, 28, 28)) },
			"nn: Conv2d(1→32, kernel 3): input [64 3 28 28] does not match in_channels 1"},
		"conv rank": {func() { Conv2d(1, 32, 3).Forward(tensor.Zeros(64, 784)) },
			"nn: Conv2d(1→32, kernel 3): input [64 784] is not [N, C, H, W]"},
		"conv small": {func() { Conv2d(1, 2, 5).Forward(tensor.Zeros(1, 1, 4, 9)) },
			"nn: Conv2d(1→2, kernel 5): input [1 1 4 9] (padded 4x9) is smaller than the kernel 5x5"},
		"pool rank": {func() { MaxPool2d(2).Forward(tensor.Zeros(4, 4)) },
			"nn: MaxPool2d(2): input [4 4] is not [N, C, H, W]"},
		"pool padding": {func() { AvgPool2d(2, Padding(2)) },
			"nn: AvgPool2d(2): padding [2 2] exceeds half the kernel"},
		"bn channels": {func() { BatchNorm2d(3).Forward(tensor.Zeros(2, 4, 5, 5)) },
			"nn: BatchNorm2d(3): input [2 4 5 5] does not match num_features 3"},
		"bn rank": {func() { BatchNorm1d(3).Forward(tensor.Zeros(2, 3, 5, 5)) },
			"nn: BatchNorm1d(3): input [2 3 5 5] is not [N, C] or [N, C, L]"},
		"bn one value": {func() { BatchNorm1d(3).Forward(tensor.Zeros(1, 3)) },
			"nn: BatchNorm1d(3): input [1 3] has 1 value per channel; training needs more than 1"},
		"dropout p":     {func() { Dropout(1.5) }, "nn: Dropout(1.5): probability must be in [0, 1]"},
		"pool option":   {func() { MaxPool2d(2, NoBias()) }, "nn: MaxPool2d does not take option NoBias"},
		"bn option":     {func() { BatchNorm2d(2, Stride(1)) }, "nn: BatchNorm2d does not take option Stride"},
		"conv negative": {func() { Conv2d(1, 0, 3) }, "nn: Conv2d(1, 0, kernel 3): sizes must be positive"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if msg := mustPanic(t, c.f); msg != c.want {
				t.Errorf("panic\n %q\nwant\n %q", msg, c.want)
			}
		})
	}
}

func TestConvOptionsAndUnbatchedInput(t *testing.T) {
	c := Conv2d(3, 4, 3, Stride(2), Padding(1))
	if c.Stride != [2]int{2, 2} || c.Padding != [2]int{1, 1} || c.Bias == nil {
		t.Errorf("options not applied: %s", c)
	}
	y := c.Forward(tensor.Zeros(3, 7, 6))
	if !slices.Equal(y.Shape(), []int{4, 4, 3}) {
		t.Errorf("unbatched conv output %v, want [4 4 3]", y.Shape())
	}
	p := MaxPool2d(3)
	if p.Stride != [2]int{3, 3} {
		t.Errorf("pool stride defaults to %v, want the kernel", p.Stride)
	}
	if got := MaxPool2d(3, Stride(1)).Forward(tensor.Zeros(2, 5, 5)).Shape(); !slices.Equal(got, []int{2, 3, 3}) {
		t.Errorf("unbatched pool output %v", got)
	}
	if s := Conv2d(1, 2, 3, NoBias()).String(); s != "Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1), bias=False)" {
		t.Errorf("String %q", s)
	}
}

func TestConvInitIsPyTorchDefault(t *testing.T) {
	c := Conv2d(16, 64, 5)
	bound := 1 / math.Sqrt(16*5*5)
	checkUniform(t, "conv weight", c.Weight.Data(), bound)
	b := tensor.Zeros(4096)
	biasInit(tensor.NewRNG(1), b, 400)
	checkUniform(t, "conv bias", b.Data(), bound)
}

func TestBatchNormTrainEvalSwitching(t *testing.T) {
	bn := BatchNorm1d(2)
	x := tensor.New([]float32{1, 10, 3, 20, 5, 30, 7, 40}, 4, 2)
	y := bn.Forward(x)
	// Batch mean (4, 25), unbiased var (20/3, 500/3): running = 0.9·init + 0.1·batch.
	wantMean := []float64{0.4, 2.5}
	wantVar := []float64{0.9 + 0.1*20/3, 0.9 + 0.1*500/3}
	for i := range 2 {
		if math.Abs(float64(bn.RunningMean.Data()[i])-wantMean[i]) > 1e-6 ||
			math.Abs(float64(bn.RunningVar.Data()[i])-wantVar[i]) > 1e-5 {
			t.Errorf("running stats after one batch: mean %v var %v, want %v %v",
				bn.RunningMean.Data(), bn.RunningVar.Data(), wantMean, wantVar)
		}
	}
	if bn.NumBatchesTracked.Item() != 1 {
		t.Errorf("num_batches_tracked %v, want 1", bn.NumBatchesTracked.Item())
	}
	// Training output uses batch statistics: each column has mean 0.
	if s := y.Data()[0] + y.Data()[2] + y.Data()[4] + y.Data()[6]; math.Abs(float64(s)) > 1e-5 {
		t.Errorf("training output column sums to %v", s)
	}

	SetTrain(bn, false)
	mean, variance := slices.Clone(bn.RunningMean.Data()), slices.Clone(bn.RunningVar.Data())
	y = bn.Forward(x)
	if !slices.Equal(mean, bn.RunningMean.Data()) || !slices.Equal(variance, bn.RunningVar.Data()) || bn.NumBatchesTracked.Item() != 1 {
		t.Error("eval forward changed the running statistics")
	}
	want := (1 - 0.4) / math.Sqrt(wantVar[0]+1e-5)
	if math.Abs(float64(y.Data()[0])-want) > 1e-5 {
		t.Errorf("eval output %v, want %v (running statistics)", y.Data()[0], want)
	}
	sd := StateDict(bn)
	if last := sd[len(sd)-1]; last.Name != "num_batches_tracked" || last.Dtype != Int64 || last.Tensor.Dim() != 0 {
		t.Errorf("last state entry %s %v %s, want num_batches_tracked [] int64", last.Name, last.Tensor.Shape(), last.Dtype)
	}
}

func TestDropoutTrainEvalAndSeed(t *testing.T) {
	d := Dropout(0.25)
	x := tensor.Full(1, 100000)
	y := d.Forward(x).Data()
	zeros := 0
	for _, v := range y {
		switch v {
		case 0:
			zeros++
		case 1 / 0.75:
		default:
			t.Fatalf("dropout output %v is neither 0 nor 1/(1-p)", v)
		}
	}
	// Binomial(1e5, 0.25): σ ≈ 137.
	if zeros < 25000-700 || zeros > 25000+700 {
		t.Errorf("%d of 100000 dropped, want about 25000", zeros)
	}
	d.Seed(5)
	a := slices.Clone(d.Forward(x).Data())
	d.Seed(5)
	if !slices.Equal(a, d.Forward(x).Data()) {
		t.Error("same seed gave different masks")
	}
	SetTrain(d, false)
	if !slices.Equal(d.Forward(x).Data(), x.Data()) {
		t.Error("dropout in eval mode is not the identity")
	}
}

func TestReprOfCustomModule(t *testing.T) {
	want := `customNet(
  (fc1): Linear(in_features=10, out_features=8, bias=True)
  (bn): BatchNorm1d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
  (head): Sequential(
    (0): ReLU()
    (1): Linear(in_features=8, out_features=4, bias=False)
    (2): Linear(in_features=4, out_features=2, bias=True)
  )
)`
	if got := Repr(newCustomNet()); got != want {
		t.Errorf("Repr:\n%s\nwant:\n%s", got, want)
	}
	if got := fmt.Sprint(Sequential()); got != "Sequential()" {
		t.Errorf("empty Sequential prints %q", got)
	}
	if got := Repr(AvgPool2d(3, StrideHW(1, 2))); got != "AvgPool2d(kernel_size=3, stride=(1, 2), padding=0)" {
		t.Errorf("AvgPool2d prints %q", got)
	}
}
