package tensor

import (
	"errors"
	"math"
	"testing"
)

func sumAll(t *Tensor) *Tensor {
	ones := Full(1, 1, t.Len())
	return MatMul(ones, t.Reshape(t.Len(), 1), false, false)
}

func TestGradHooksFireInReverseUseOrderBeforeBackwardReturns(t *testing.T) {
	w1 := New([]float32{1, 2, 3, 4}, 2, 2).SetRequiresGrad(true)
	w2 := New([]float32{0.5, -1, 2, 1}, 2, 2).SetRequiresGrad(true)
	x := New([]float32{1, -1}, 1, 2)
	var fired []string
	w1.AddGradHook(func(p *Pass, _ *Tensor) {
		fired = append(fired, "w1")
		if w1.Grad() == nil {
			t.Error("w1 hook fired before its gradient existed")
		}
	})
	w2.AddGradHook(func(p *Pass, _ *Tensor) {
		fired = append(fired, "w2")
		p.OnFinish(func() error { fired = append(fired, "finish"); return nil })
	})
	h := MatMul(x, w1, false, true)
	y := MatMul(h, w2, false, true)
	if err := sumAll(y).Backward(); err != nil {
		t.Fatal(err)
	}
	want := []string{"w2", "w1", "finish"}
	if len(fired) != 3 || fired[0] != want[0] || fired[1] != want[1] || fired[2] != want[2] {
		t.Fatalf("hooks fired %v, want %v", fired, want)
	}
	// y = sum(W2 · W1 · x); dW1 = (W2ᵀ·1) xᵀ
	g := w1.Grad().Data()
	c0, c1 := float32(0.5+2), float32(-1+1)
	wantG := []float32{c0 * 1, c0 * -1, c1 * 1, c1 * -1}
	for i := range g {
		if math.Abs(float64(g[i]-wantG[i])) > 1e-6 {
			t.Fatalf("w1 grad %v, want %v", g, wantG)
		}
	}
}

func TestBackwardReturnsFinishErrors(t *testing.T) {
	w := New([]float32{1, 2}, 1, 2).SetRequiresGrad(true)
	boom := errors.New("boom")
	w.AddGradHook(func(p *Pass, _ *Tensor) { p.OnFinish(func() error { return boom }) })
	err := sumAll(MatMul(w, New([]float32{1, 1}, 2, 1), false, false)).Backward()
	if !errors.Is(err, boom) {
		t.Fatalf("Backward error %v, want boom", err)
	}
}
