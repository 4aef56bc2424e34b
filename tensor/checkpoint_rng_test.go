package tensor

import "testing"

// TestRNGClone: a clone draws what the original would next, and drawing
// from one does not move the other.
func TestRNGClone(t *testing.T) {
	r := NewRNG(42)
	r.Uint64()
	c := r.Clone()
	want := []uint64{r.Uint64(), r.Uint64(), r.Uint64()}
	for i, w := range want {
		if got := c.Uint64(); got != w {
			t.Fatalf("draw %d: clone %d, original %d", i, got, w)
		}
	}
	// Shared state would give the clone the draw after the original's.
	d := r.Clone()
	if a, b := r.Uint64(), d.Uint64(); a != b {
		t.Fatalf("after the original drew %d the clone drew %d: it moved with the original", a, b)
	}
}
