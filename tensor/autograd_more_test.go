package tensor

import (
	"errors"
	"slices"
	"testing"
)

func TestBackwardAccumulatesAcrossPasses(t *testing.T) {
	rng := NewRNG(10)
	x := randT(rng, -1, 1, 3, 4)
	w := randT(rng, -1, 1, 2, 4).SetRequiresGrad(true)
	b := randT(rng, -1, 1, 2).SetRequiresGrad(true)
	loss := func() *Tensor { return CrossEntropy(Linear(x, w, b), []int{0, 1, 1}, "mean") }
	if err := loss().Backward(); err != nil {
		t.Fatal(err)
	}
	once := w.Grad().Clone()
	if err := loss().Backward(); err != nil {
		t.Fatal(err)
	}
	for i, g := range w.Grad().data {
		if d := g - 2*once.data[i]; d > 1e-6 || d < -1e-6 {
			t.Fatalf("after two passes grad[%d] = %v, want 2×%v", i, g, once.data[i])
		}
	}
	w.ZeroGrad()
	if slices.ContainsFunc(w.Grad().data, func(v float32) bool { return v != 0 }) {
		t.Fatal("ZeroGrad left nonzero values")
	}
}

func TestSetGradStorageIsAccumulatedInPlace(t *testing.T) {
	w := New([]float32{1, 2}, 2).SetRequiresGrad(true)
	bucket := make([]float32, 4) // like a DDP bucket holding several grads
	w.SetGrad(New(bucket[1:3], 2))
	if err := Sum(Mul(w, w), false).Backward(); err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, 2, 4, 0}; !slices.Equal(bucket, want) {
		t.Fatalf("bucket %v, want %v", bucket, want)
	}
}

func TestNoGradRecordsNothing(t *testing.T) {
	w := New([]float32{1, 2}, 2).SetRequiresGrad(true)
	var y *Tensor
	NoGrad(func() { y = Sum(Mul(w, w), false) })
	if y.RequiresGrad() || !y.IsLeaf() {
		t.Fatal("op under NoGrad recorded history")
	}
	if err := y.Backward(); err == nil {
		t.Fatal("Backward on an untracked result succeeded")
	}
	if !GradEnabled() {
		t.Fatal("NoGrad did not restore grad mode")
	}
	if w.Grad() != nil {
		t.Fatal("NoGrad produced a gradient")
	}
}

func TestBackwardErrors(t *testing.T) {
	w := New([]float32{1, 2}, 2).SetRequiresGrad(true)
	if err := MulScalar(w, 2).Backward(); !errors.Is(err, ErrNotScalar) {
		t.Fatalf("Backward on [2]: %v, want ErrNotScalar", err)
	}
	if err := MulScalar(w, 2).BackwardWith(Zeros(3)); err == nil {
		t.Fatal("BackwardWith accepted a mis-shaped gradient")
	}
}

func TestLeafRootBackwardAccumulates(t *testing.T) {
	w := Scalar(3).SetRequiresGrad(true)
	w.SetGrad(Scalar(1))
	if err := w.Backward(); err != nil {
		t.Fatal(err)
	}
	if got := w.Grad().Item(); got != 2 {
		t.Fatalf("grad %v, want 1 (old) + 1", got)
	}
}

// TestHooksFireOnceAfterLastUse checks the DDP contract on a three-layer
// net where the first layer's weight is used twice (shared): every hook
// fires exactly once, in reverse order of first use, and sees its final
// gradient.
func TestHooksFireOnceAfterLastUse(t *testing.T) {
	rng := NewRNG(11)
	x := randT(rng, -1, 1, 4, 3)
	w1, b1 := randT(rng, -1, 1, 3, 3), randT(rng, -1, 1, 3)
	w2, b2 := randT(rng, -1, 1, 5, 3), randT(rng, -1, 1, 5)
	unused := randT(rng, -1, 1, 2)
	params := map[string]*Tensor{"w1": w1, "b1": b1, "w2": w2, "b2": b2, "unused": unused}
	var fired []string
	atHook := map[string]*Tensor{}
	for name, p := range params {
		p.SetRequiresGrad(true)
		p.AddGradHook(func(pass *Pass, q *Tensor) {
			if q != p || !pass.Reaches(p) {
				t.Errorf("hook of %s got wrong tensor or unreached pass", name)
			}
			fired = append(fired, name)
			atHook[name] = p.Grad().Clone()
		})
	}
	h := ReLU(Linear(x, w1, b1))
	h = Tanh(Linear(h, w1, b1)) // shared layer: w1, b1 used again
	loss := CrossEntropy(Linear(h, w2, b2), []int{0, 4, 2, 1}, "sum")
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	// The last Linear (w2, b2) finishes first; w1 and b1 only after both uses.
	if len(fired) != 4 || !sameSet(fired[:2], "w2", "b2") || !sameSet(fired[2:], "w1", "b1") {
		t.Fatalf("hooks fired %v, want w2,b2 (any order) then w1,b1", fired)
	}
	for name, g := range atHook {
		if !slices.Equal(g.data, params[name].Grad().data) {
			t.Errorf("%s: gradient changed after its hook fired", name)
		}
	}
	if unused.Grad() != nil {
		t.Error("unused parameter got a gradient")
	}
}

func sameSet(got []string, want ...string) bool {
	a, b := slices.Clone(got), slices.Clone(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestRemoveGradHook(t *testing.T) {
	w := Scalar(2).SetRequiresGrad(true)
	n := 0
	remove := w.AddGradHook(func(*Pass, *Tensor) { n++ })
	_ = MulScalar(w, 3).Backward()
	remove()
	_ = MulScalar(w, 3).Backward()
	if n != 1 {
		t.Fatalf("hook ran %d times, want 1 (removed after the first pass)", n)
	}
}

func TestShapePanicsNameBothShapes(t *testing.T) {
	cases := []struct {
		name string
		f    func()
		want string
	}{
		{"Linear", func() { Linear(Zeros(2, 3), Zeros(4, 5), nil) }, "tensor: Linear: input [2 3] does not match weight [4 5] ([out, in])"},
		{"Conv2d", func() { Conv2d(Zeros(1, 2, 5, 5), Zeros(3, 4, 3, 3), nil, [2]int{1, 1}, [2]int{0, 0}) },
			"tensor: Conv2d: input [1 2 5 5] ([N, C, H, W]) does not match weight [3 4 3 3] ([O, C, KH, KW])"},
		{"Add", func() { Add(Zeros(2, 3), Zeros(4)) }, "tensor: Add: shapes [2 3] and [4] do not broadcast"},
		{"CrossEntropy target", func() { CrossEntropy(Zeros(2, 3), []int{0, 3}, "mean") }, "tensor: CrossEntropy: target[1] = 3 out of range [0, 3)"},
		{"MSELoss", func() { MSELoss(Zeros(2), Zeros(3), "mean") }, "tensor: MSELoss: shapes [2] and [3] differ"},
	}
	for _, c := range cases {
		func() {
			defer func() {
				if r := recover(); r != c.want {
					t.Errorf("%s: panic %v, want %q", c.name, r, c.want)
				}
			}()
			c.f()
		}()
	}
}

func TestBackwardThroughReleasedGraphFails(t *testing.T) {
	w := New([]float32{1, 2}, 2).SetRequiresGrad(true)
	h := Mul(w, w)
	loss := Sum(h, false)
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	if err := loss.Backward(); !errors.Is(err, ErrGraphReleased) {
		t.Fatalf("second Backward: %v, want ErrGraphReleased", err)
	}
	// Reusing an intermediate of the released graph is caught too...
	if err := Sum(Add(h, w), false).Backward(); !errors.Is(err, ErrGraphReleased) {
		t.Fatalf("Backward through a released intermediate: %v, want ErrGraphReleased", err)
	}
	// ...and Detach makes it a constant, as in PyTorch.
	w.ZeroGrad()
	if err := Sum(Add(h.Detach(), w), false).Backward(); err != nil {
		t.Fatal(err)
	}
	if g := w.Grad().Data(); g[0] != 1 || g[1] != 1 {
		t.Fatalf("grad through detached intermediate %v, want [1 1]", g)
	}
}

// TestResidualAddGradient checks the gradients through residual
// connections, where Add hands its output's gradient buffer to one input
// and copies it to the other: y = h + h∘h + x with h = 2x, the sum of y
// weighted by g, so dy/dx = g·(2·(1 + 2h) + 1); and Add(h, h), where both
// inputs are one tensor, must give 2g.
func TestResidualAddGradient(t *testing.T) {
	rng := NewRNG(12)
	x := randT(rng, -1, 1, 5, 7).SetRequiresGrad(true)
	g := randT(rng, -1, 1, 5, 7)
	h := MulScalar(x, 2)
	y := Add(Add(h, Mul(h, h)), x)
	if err := y.BackwardWith(g); err != nil {
		t.Fatal(err)
	}
	for i, got := range x.Grad().data {
		hv := 2 * x.data[i]
		want := g.data[i] * (2*(1+2*hv) + 1)
		if d := got - want; d > 1e-5 || d < -1e-5 {
			t.Fatalf("grad[%d] = %v, want %v", i, got, want)
		}
	}
	x.ZeroGrad()
	h = MulScalar(x, 2)
	if err := Add(h, h).BackwardWith(g); err != nil {
		t.Fatal(err)
	}
	for i, got := range x.Grad().data {
		if want := 4 * g.data[i]; got != want {
			t.Fatalf("Add(h, h): grad[%d] = %v, want %v", i, got, want)
		}
	}
}

// TestZeroGradDeferred checks ZeroGrad's deferred zeros: a linear layer's
// weight gradient overwritten whole by its product, a weight used twice
// (the first use overwrites, the second adds), a bias added to, and a
// parameter no pass reaches, which must read as zeros, not as the last
// pass's gradient.
func TestZeroGradDeferred(t *testing.T) {
	rng := NewRNG(13)
	x := randT(rng, -1, 1, 6, 5)
	w := randT(rng, -1, 1, 4, 5).SetRequiresGrad(true)
	b := randT(rng, -1, 1, 4).SetRequiresGrad(true)
	unused := randT(rng, -1, 1, 3).SetRequiresGrad(true)
	loss := func(twice bool) *Tensor {
		y := Linear(x, w, b)
		if twice {
			y = Add(y, Linear(x, w, nil))
		}
		return Sum(Mul(y, y), false)
	}
	grads := func(twice bool) (gw, gb []float32) {
		if err := loss(twice).Backward(); err != nil {
			t.Fatal(err)
		}
		return slices.Clone(w.Grad().data), slices.Clone(b.Grad().data)
	}
	// Fresh gradients, from nothing, as references.
	w.SetGrad(nil)
	b.SetGrad(nil)
	refW1, refB1 := grads(false)
	w.SetGrad(nil)
	b.SetGrad(nil)
	refW2, refB2 := grads(true)
	if err := Sum(Mul(unused, unused), false).Backward(); err != nil {
		t.Fatal(err)
	}
	for _, twice := range []bool{false, true, false} {
		for _, p := range []*Tensor{w, b, unused} {
			p.ZeroGrad()
		}
		gw, gb := grads(twice)
		wantW, wantB := refW1, refB1
		if twice {
			wantW, wantB = refW2, refB2
		}
		for i := range gw {
			if d := gw[i] - wantW[i]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("twice=%v: w grad[%d] = %v, want %v", twice, i, gw[i], wantW[i])
			}
		}
		for i := range gb {
			if d := gb[i] - wantB[i]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("twice=%v: b grad[%d] = %v, want %v", twice, i, gb[i], wantB[i])
			}
		}
		if slices.ContainsFunc(unused.Grad().data, func(v float32) bool { return v != 0 }) {
			t.Fatalf("twice=%v: a parameter no pass reached reads %v after ZeroGrad", twice, unused.Grad().data)
		}
	}
}
