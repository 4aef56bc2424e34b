package kernels

import "testing"

// TestPrefetch checks that Prefetch accepts empty, short, unaligned and
// long slices, including one ending at its backing array's end, and
// leaves their contents as they were: it is a hint and nothing else.
func TestPrefetch(t *testing.T) {
	x := make([]float32, 4099)
	for i := range x {
		x[i] = float32(i)
	}
	for _, s := range [][]float32{nil, x[:0], x[:1], x[3:20], x[1:], x[4000:], x} {
		Prefetch(s)
	}
	for i, v := range x {
		if v != float32(i) {
			t.Fatalf("x[%d] = %v after Prefetch, want %d", i, v, i)
		}
	}
}
