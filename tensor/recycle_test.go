package tensor

import (
	"errors"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/tensorhook"
)

// TestFreeWithGraph checks that an intermediate marked freeWithGraph (here
// through tensorhook.FreeWithGraph, as nn.Sequential does) keeps
// its values until every op reading it has run its backward, gives the
// same gradients as an unmarked one, is emptied when released, and that
// results the caller holds are never overwritten by later ops reusing the
// storage.
func TestFreeWithGraph(t *testing.T) {
	rng := NewRNG(31)
	x := randT(rng, -1, 1, 64, 40).SetRequiresGrad(true)
	w := randT(rng, -1, 1, 30, 40).SetRequiresGrad(true)
	run := func(free bool) (out []float32, gx, gw []float32, h *Tensor) {
		x.SetGrad(nil)
		w.SetGrad(nil)
		h = ReLU(Linear(x, w, nil)) // [64, 30]: large enough to recycle
		y := Linear(h, Narrow(w.Detach(), 1, 0, 30), nil)
		if free {
			tensorhook.FreeWithGraph(h)
		}
		out = slices.Clone(y.data)
		if err := Sum(Mul(y, y), false).Backward(); err != nil {
			t.Fatal(err)
		}
		return out, x.Grad().Clone().data, w.Grad().Clone().data, h
	}
	wantOut, wantGx, wantGw, kept := run(false)
	keptData := slices.Clone(kept.data)
	for i := 0; i < 3; i++ {
		out, gx, gw, h := run(true)
		if !slices.Equal(out, wantOut) || !slices.Equal(gx, wantGx) || !slices.Equal(gw, wantGw) {
			t.Fatalf("step %d: results differ with freeWithGraph", i)
		}
		if h.Len() != 0 {
			t.Fatalf("step %d: released intermediate still has %d values", i, h.Len())
		}
		// The unmarked intermediate from the first run is untouched.
		if !slices.Equal(kept.data, keptData) {
			t.Fatalf("step %d: an unmarked tensor was overwritten", i)
		}
	}
	// A second Backward through the released graph fails instead of
	// recycling the storage twice.
	h := ReLU(Linear(x, w, nil))
	h.freeWithGraph()
	loss := Sum(h, false)
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	if err := loss.Backward(); !errors.Is(err, ErrGraphReleased) {
		t.Fatalf("second Backward: %v, want ErrGraphReleased", err)
	}
	// Leaves and untracked results are never freed.
	leaf := Zeros(64, 40)
	leaf.freeWithGraph()
	NoGrad(func() {
		u := ReLU(Linear(x, w, nil))
		u.freeWithGraph()
		if u.recycle || leaf.recycle {
			t.Fatal("freeWithGraph marked a tensor without history")
		}
	})
}

// TestRecycledOpBuffersInterleaved builds several graphs before running
// their backward passes, so that buffers an op hands back after its
// backward (ReLU and dropout masks, pooling argmax) are reused by ops of
// graphs whose backward is still to come: their gradients must equal the
// unfused ops' computed one graph at a time.
func TestRecycledOpBuffersInterleaved(t *testing.T) {
	rng := NewRNG(5)
	one, zero := [2]int{1, 1}, [2]int{}
	w0 := randT(rng, -1, 1, 8, 4, 3, 3).SetRequiresGrad(true)
	w := randT(rng, -1, 1, 8, 8, 3, 3).SetRequiresGrad(true)
	// Every buffer is large enough to be recycled: ReLU masks of 11 kB,
	// argmax and dropout masks of 20k elements. Random signs make the side
	// ReLU's mask unrelated to the first convolution's.
	signs := randT(rng, -1, 1, 8, 8, 38, 38)
	for i, v := range signs.data {
		signs.data[i] = 1
		if v < 0 {
			signs.data[i] = -1
		}
	}
	// The reference uses the unfused ops, one graph at a time.
	fused := true
	build := func(seed uint64) (*Tensor, *Tensor) {
		x := randT(NewRNG(seed), -1, 1, 8, 4, 40, 40).SetRequiresGrad(true)
		// c feeds a convolution (a dense gradient) and a side ReLU whose
		// mask has c's mask's size and an unrelated pattern.
		var c, y *Tensor
		if fused {
			c = Conv2d(x, w0, nil, one, zero, PostReLU)
			y = Conv2d(c, w, nil, one, zero, PostReLU, PostMaxPool2x2)
		} else {
			c = ReLU(Conv2d(x, w0, nil, one, zero))
			y = MaxPool2d(ReLU(Conv2d(c, w, nil, one, zero)), [2]int{2, 2}, [2]int{2, 2}, zero)
		}
		r := ReLU(Mul(c, signs))
		y = Dropout(y, 0.5, true, NewRNG(seed))
		return x, Add(Sum(Mul(y, y), false), Sum(Mul(r, r), false))
	}
	grads := func(seeds ...uint64) map[uint64][]float32 {
		xs, losses := map[uint64]*Tensor{}, map[uint64]*Tensor{}
		for _, s := range seeds {
			xs[s], losses[s] = build(s)
		}
		out := map[uint64][]float32{}
		for _, s := range seeds {
			w.SetGrad(nil)
			w0.SetGrad(nil)
			if err := losses[s].Backward(); err != nil {
				t.Fatal(err)
			}
			// A graph built after this backward reuses its buffers.
			build(100 + s)
			out[s] = append(append(xs[s].Grad().Clone().data, w.Grad().data...), w0.Grad().data...)
		}
		return out
	}
	want := map[uint64][]float32{}
	fused = false
	for _, s := range []uint64{1, 2, 3} {
		want[s] = grads(s)[s]
	}
	fused = true
	got := grads(1, 2, 3)
	for s := range want {
		if !slices.Equal(got[s], want[s]) {
			t.Fatalf("graph %d: gradients differ when graphs are interleaved", s)
		}
	}
}
