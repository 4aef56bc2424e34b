package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSplitAlongN checks the choice of the dimension split over threads:
// columns unless they give a thread no register block or divide clearly
// less evenly than rows.
func TestSplitAlongN(t *testing.T) {
	impl := &gemmImpl{mr: 6, nr: 64}
	cases := []struct {
		threads, m, n int
		want          bool
	}{
		{2, 64, 512, true},    // MLP forward: 4 blocks each
		{2, 4096, 128, true},  // GPT c_proj: one block each
		{2, 512, 784, false},  // MLP fc1 dW: 7 and 6 column blocks, 43 and 43 row blocks
		{2, 64, 784, true},    // too few rows to split them
		{2, 4096, 32, false},  // narrower than one block per thread
		{3, 4096, 384, true},  // 2 blocks each
		{2, 1000, 192, false}, // 2 and 1 column blocks
	}
	for _, c := range cases {
		if got := splitAlongN(impl, c.threads, c.m, c.n); got != c.want {
			t.Errorf("threads=%d m=%d n=%d: split along n %v, want %v", c.threads, c.m, c.n, got, c.want)
		}
	}
}

// TestSgemmRowSplitSameBits checks that shapes split along rows for
// balance give the same bits as one thread, for every implementation and
// transpose, with and without a bias.
func TestSgemmRowSplitSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	for _, impl := range impls() {
		for _, s := range [][3]int{{512, 784, 64}, {1000, 192, 40}} {
			m, n, k := s[0], s[1], s[2]
			a, b, bias := randSlice(r, m*k), randSlice(r, k*n), randSlice(r, n)
			for _, tr := range trans {
				lda, ldb := k, n
				if tr[0] {
					lda = m
				}
				if tr[1] {
					ldb = k
				}
				for _, withBias := range []bool{false, true} {
					var bs []float32
					if withBias {
						bs = bias
					}
					run := func(threads int) []float32 {
						c := randSlice(rand.New(rand.NewPCG(5, 5)), m*n)
						beta := float32(0.5)
						if withBias {
							beta = 1
						}
						sgemmWith(impl, threads, tr[0], tr[1], m, n, k, 1, a, lda, b, ldb, beta, bs, c, n)
						return c
					}
					want := run(1)
					for _, threads := range []int{2, 3} {
						got := run(threads)
						if msg := firstBitsDiff(got, want); msg != "" {
							t.Fatalf("%s m=%d n=%d k=%d trans=%v bias=%v threads=%d: %s", impl.name, m, n, k, tr, withBias, threads, msg)
						}
					}
				}
			}
		}
	}
}

// firstBitsDiff describes the first element whose bits differ, or is "".
func firstBitsDiff(got, want []float32) string {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Sprintf("C[%d]=%g, one thread %g", i, got[i], want[i])
		}
	}
	return ""
}
