package tensor

import (
	"errors"
	"slices"
	"testing"
)

// TestFreeWithGraph checks that an intermediate marked freeWithGraph (here
// through Recycle, as nn.Sequential does) keeps
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
			Recycle(h)
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

// TestPoolBoundedByBytes checks that the buffer pool never holds more
// than maxScratchBytes, nor more than maxScratchPer buffers of one size,
// however many buffers of however many sizes are handed back, and that
// its byte count is the sum of what its free lists hold. The buffers are
// slices of one backing array, so the test counts bytes without
// allocating them.
func TestPoolBoundedByBytes(t *testing.T) {
	ReleasePool()
	defer ReleasePool() // the aliased buffers must not reach other tests
	backing := make([]float32, 1<<20)
	for round := 0; round < 3; round++ {
		for n := minScratchLen; n <= len(backing); n *= 2 {
			for i := 0; i < 2*maxScratchPer; i++ {
				putBuf(backing[:n])
				putBuf(backing[:n-1]) // a second size per power of two
			}
		}
	}
	held, _ := PoolStats()
	sum := 0
	scratch.mu.Lock()
	for n, l := range scratch.free {
		if len(l) > maxScratchPer {
			t.Errorf("%d buffers of length %d kept, at most %d", len(l), n, maxScratchPer)
		}
		sum += 4 * n * len(l)
	}
	scratch.mu.Unlock()
	if held > maxScratchBytes || int64(sum) != held {
		t.Fatalf("pool holds %d bytes by its count, %d by its lists; the bound is %d", held, sum, maxScratchBytes)
	}
	if held < maxScratchBytes/2 {
		t.Fatalf("pool holds only %d bytes: buffers were dropped below the bound %d", held, maxScratchBytes)
	}
	ReleasePool()
	if held, _ := PoolStats(); held != 0 {
		t.Fatalf("releasePool left %d bytes", held)
	}
}

// TestPoolSteadyState checks that repeating a training step whose
// intermediates are recycled takes every buffer from the pool after the
// first step: no fresh poolable bytes, and the same bytes held after each.
func TestPoolSteadyState(t *testing.T) {
	ReleasePool()
	defer ReleasePool()
	rng := NewRNG(7)
	x := randT(rng, -1, 1, 64, 40)
	w1 := randT(rng, -1, 1, 48, 40).SetRequiresGrad(true)
	w2 := randT(rng, -1, 1, 32, 48).SetRequiresGrad(true)
	var held0, fresh0 int64
	for step := 1; step <= 5; step++ {
		a := Linear(x, w1, nil) // [64, 48]: large enough to pool
		h := GELU(a)
		y := Linear(h, w2, nil)
		sq := Mul(y, y)
		for _, r := range []*Tensor{a, h, y, sq} {
			r.freeWithGraph()
		}
		if err := Sum(sq, false).Backward(); err != nil {
			t.Fatal(err)
		}
		held, fresh := PoolStats()
		if step == 1 {
			held0, fresh0 = held, fresh
			continue
		}
		if held != held0 || fresh != fresh0 {
			t.Fatalf("step %d: pool holds %d bytes (%d after step 1) and took %d fresh bytes since", step, held, held0, fresh-fresh0)
		}
	}
	if held0 == 0 {
		t.Fatal("nothing was recycled")
	}
}
