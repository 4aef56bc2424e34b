package tensor

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestBackwardPreHookSeesCompleteGradient: the hook on h runs once, when
// both of h's consumers have added their part of h's gradient and before
// the op that produced h runs backward (w's gradient not yet computed).
func TestBackwardPreHookSeesCompleteGradient(t *testing.T) {
	w := New([]float32{0.5, -1, 2}, 3).SetRequiresGrad(true)
	c := New([]float32{3, 4, 5}, 3)
	h := MulScalar(w, 2)
	loss := sumAll(Add(Mul(h, c), Exp(h)))
	var log []string
	var seen []float32
	h.AddBackwardPreHook(func(_ *Pass, x *Tensor) {
		log = append(log, "h")
		if x != h {
			t.Errorf("hook got another tensor")
		}
		if w.Grad() != nil {
			t.Errorf("w's gradient exists before h's producer ran backward")
		}
		seen = append([]float32(nil), h.passGrad...)
	})
	w.AddGradHook(func(*Pass, *Tensor) { log = append(log, "w") })
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(log, []string{"h", "w"}) {
		t.Fatalf("hooks fired %v, want [h w]", log)
	}
	for i, hv := range h.Data() {
		want := c.Data()[i] + float32(math.Exp(float64(hv)))
		if math.Abs(float64(seen[i]-want)) > 1e-5*math.Abs(float64(want)) {
			t.Errorf("h's gradient at the hook [%d] = %g, want %g (both consumers)", i, seen[i], want)
		}
	}
	if h.preHooks != nil {
		t.Errorf("hooks kept after Backward released the graph")
	}
}

// TestBackwardPreHookRemove: a removed hook does not run, the others do,
// in registration order.
func TestBackwardPreHookRemove(t *testing.T) {
	w := New([]float32{1, 2}, 2).SetRequiresGrad(true)
	h := MulScalar(w, 3)
	var log []int
	for i := range 3 {
		remove := h.AddBackwardPreHook(func(*Pass, *Tensor) { log = append(log, i) })
		if i == 1 {
			remove()
		}
	}
	if err := sumAll(h).Backward(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(log, []int{0, 2}) {
		t.Fatalf("hooks ran %v, want [0 2]", log)
	}
}

// TestBackwardPreHookNotReached: a hook on a result that the
// differentiated graph does not use never runs.
func TestBackwardPreHookNotReached(t *testing.T) {
	w := New([]float32{1, 2}, 2).SetRequiresGrad(true)
	unused := MulScalar(w, 3)
	ran := false
	unused.AddBackwardPreHook(func(*Pass, *Tensor) { ran = true })
	if err := sumAll(MulScalar(w, 2)).Backward(); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Fatal("hook on a tensor outside the graph ran")
	}
}

// TestBackwardPreHookOnLeafPanics: leaves take AddGradHook.
func TestBackwardPreHookOnLeafPanics(t *testing.T) {
	defer func() {
		r := recover()
		if msg, _ := r.(string); !strings.Contains(msg, "AddBackwardPreHook on a tensor without recorded history") {
			t.Fatalf("panic %v", r)
		}
	}()
	New([]float32{1}, 1).SetRequiresGrad(true).AddBackwardPreHook(func(*Pass, *Tensor) {})
}
