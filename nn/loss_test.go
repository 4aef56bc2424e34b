package nn

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

func TestMSEReductionsAndGradient(t *testing.T) {
	a := tensor.New([]float32{1, 2, 3, 4}, 2, 2).SetRequiresGrad(true)
	b := tensor.New([]float32{0, 2, 5, 1}, 2, 2)
	// Squared errors 1, 0, 4, 9.
	if got := MSEWith(a, b, ReduceSum).Item(); got != 14 {
		t.Errorf("sum %v, want 14", got)
	}
	loss := MSE(a, b)
	if got := loss.Item(); got != 3.5 {
		t.Errorf("mean %v, want 3.5", got)
	}
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	want := []float32{0.5, 0, -1, 1.5} // 2(a−b)/4
	for i, g := range a.Grad().Data() {
		if math.Abs(float64(g-want[i])) > 1e-7 {
			t.Errorf("grad %v, want %v", a.Grad().Data(), want)
			break
		}
	}
	if ReduceMean.String() != "mean" || ReduceSum.String() != "sum" {
		t.Error("reduction names differ from PyTorch's")
	}
}

func TestCrossEntropyIsLogSoftmaxThenNLL(t *testing.T) {
	logits := tensor.New([]float32{2, -1, 0.5, 0, 3, -2}, 2, 3)
	target := []int{2, 1}
	ce := CrossEntropyWith(logits, target, ReduceSum).Item()
	nll := NLLWith(LogSoftmax(1).Forward(logits), target, ReduceSum).Item()
	if math.Abs(float64(ce-nll)) > 1e-6 {
		t.Errorf("cross entropy %v, log-softmax + NLL %v", ce, nll)
	}
	if mean := CrossEntropy(logits, target).Item(); math.Abs(float64(mean-ce/2)) > 1e-6 {
		t.Errorf("mean %v, want sum/2 = %v", mean, ce/2)
	}
}
