package tensor

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestSumRowsSameBitsAnyThreads checks the bias-gradient row sum split
// over columns against one pass of kernels.SumRows, bit for bit, at sizes
// below and above the split with widths off the column block.
func TestSumRowsSameBitsAnyThreads(t *testing.T) {
	rng := NewRNG(11)
	for _, s := range [][2]int{{3, 10}, {4096, 384}, {4096, 129}, {700, 1000}, {64, 10}} {
		rows, n := s[0], s[1]
		g := Rand(rng, rows*n).data
		init := Rand(rng, n).data
		want := append([]float32(nil), init...)
		kernels.SumRows(want, g, rows)
		for _, threads := range []int{1, 2, 3} {
			prev := kernels.SetNumThreads(threads)
			got := append([]float32(nil), init...)
			sumRows(got, g, rows)
			kernels.SetNumThreads(prev)
			for j := range want {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("rows=%d n=%d threads=%d: dst[%d]=%g, one pass %g", rows, n, threads, j, got[j], want[j])
				}
			}
		}
	}
}
