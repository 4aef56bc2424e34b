package data_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// linearData is n examples of 3 features with the target 2·x0 − 3·x1 +
// 0.5·x2 + 1.
func linearData(n int) (x, y *tensor.Tensor) {
	xs, ys := make([]float32, 3*n), make([]float32, n)
	for i := range n {
		for j := range 3 {
			xs[3*i+j] = float32((i*7+j*13)%17)/8.5 - 1
		}
		ys[i] = 2*xs[3*i] - 3*xs[3*i+1] + 0.5*xs[3*i+2] + 1
	}
	return tensor.New(xs, n, 3), tensor.New(ys, n, 1)
}

// A linear regression trained on float targets through the loader finds
// the weights that made them.
func TestTargetLoaderLinearRegressionConverges(t *testing.T) {
	x, y := linearData(256)
	ds := data.NewTensorTargetDataset(x, y)
	sampler := data.NewDistributedSampler(ds.Len(), 1, 0)
	loader := data.NewTargetLoader(ds, 32, sampler)
	model := nn.Linear(3, 1)
	opt := optim.NewSGD(nn.Parameters(model), 0.1)
	var loss float32
	for epoch := range 60 {
		sampler.SetEpoch(epoch)
		for b := range loader.Batches() {
			if b.Y != nil || b.Target.Shape()[0] != b.X.Shape()[0] || b.Target.Shape()[1] != 1 {
				t.Fatalf("batch X %v Target %v Y %v", b.X.Shape(), b.Target.Shape(), b.Y)
			}
			opt.ZeroGrad()
			l := nn.MSE(model.Forward(b.X), b.Target)
			if err := l.Backward(); err != nil {
				t.Fatal(err)
			}
			opt.Step()
			loss = l.Item()
		}
	}
	w, bias := model.Weight.Data(), model.Bias.Data()[0]
	for i, want := range []float32{2, -3, 0.5} {
		if math.Abs(float64(w[i]-want)) > 1e-3 {
			t.Errorf("weight %d = %v, want %v", i, w[i], want)
		}
	}
	if math.Abs(float64(bias-1)) > 1e-3 || loss > 1e-5 {
		t.Errorf("bias %v (want 1), last loss %v", bias, loss)
	}
}

func TestTensorTargetDataset(t *testing.T) {
	x := tensor.New([]float32{1, 2, 3, 4, 5, 6}, 3, 2)
	ds := data.NewTensorTargetDataset(x, tensor.New([]float32{10, 20, 30}, 3))
	if ds.Len() != 3 || fmt.Sprint(ds.Shape(), ds.TargetShape()) != "[2] [1]" {
		t.Fatalf("len %d, shapes %v %v", ds.Len(), ds.Shape(), ds.TargetShape())
	}
	loader := data.NewTargetLoader(ds, 2, data.NewSequentialSampler(3), data.Prefetch(1))
	var got []string
	for b := range loader.Batches() {
		got = append(got, fmt.Sprint(b.X.Data(), b.Target.Shape(), b.Target.Data(), b.Indices))
	}
	if want := "[1 2 3 4] [2 1] [10 20] [0 1]|[5 6] [1 1] [30] [2]"; strings.Join(got, "|") != want {
		t.Fatalf("batches %q, want %q", strings.Join(got, "|"), want)
	}
	for name, f := range map[string]func(){
		"mismatched lengths": func() { data.NewTensorTargetDataset(x, tensor.Zeros(2, 1)) },
		"index":              func() { ds.Example(3, make([]float32, 2), make([]float32, 1)) },
		"buffer":             func() { ds.Example(0, make([]float32, 2), make([]float32, 2)) },
		"nil dataset":        func() { data.NewTargetLoader(nil, 2, data.NewSequentialSampler(3)) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), "data: ") {
					t.Errorf("%s: recover() = %v, want a data: panic", name, r)
				}
			}()
			f()
		}()
	}
}

// Regression: float targets, batched as a tensor beside the features.
func ExampleNewTargetLoader() {
	// y = 2·x + 1 at eight points.
	xs, ys := make([]float32, 8), make([]float32, 8)
	for i := range xs {
		xs[i] = float32(i)/4 - 1
		ys[i] = 2*xs[i] + 1
	}
	ds := data.NewTensorTargetDataset(tensor.New(xs, 8, 1), tensor.New(ys, 8, 1))
	loader := data.NewTargetLoader(ds, 4, data.NewSequentialSampler(ds.Len()))
	model := nn.Linear(1, 1)
	opt := optim.NewSGD(nn.Parameters(model), 0.2)
	for range 200 {
		for b := range loader.Batches() {
			opt.ZeroGrad()
			if err := nn.MSE(model.Forward(b.X), b.Target).Backward(); err != nil {
				panic(err)
			}
			opt.Step()
		}
	}
	fmt.Printf("y = %.2f·x + %.2f\n", model.Weight.Data()[0], model.Bias.Data()[0])
	// Output: y = 2.00·x + 1.00
}
