package tensor

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestColStackMergeThreads checks that the stacked path's weight-gradient
// merge, rows of the gradient spread over 3 threads, gives bit for bit
// the serial merge (mergePartials), for transposed and plain partials,
// a worker 0 that wrote into the gradient itself (no partial), and row
// counts that do not divide.
func TestColStackMergeThreads(t *testing.T) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(3))
	rng := NewRNG(21)
	for _, c := range []struct {
		o, ckk, used int
		transposed   bool
	}{{67, 131, 3, true}, {67, 131, 2, false}, {512, 2304, 2, true}, {1001, 300, 2, false}, {5, 3, 1, true}} {
		name := fmt.Sprintf("%dx%d/workers=%d/transposed=%v", c.o, c.ckk, c.used, c.transposed)
		gw0 := randT(rng, -1, 1, c.o*c.ckk).Data()
		parts := func() [][]float32 {
			p := make([][]float32, c.used)
			r := NewRNG(uint64(c.o))
			for wk := range p {
				if wk == 0 && !c.transposed {
					continue // worker 0 adds into the gradient itself
				}
				p[wk] = getBuf(c.o * c.ckk)
				copy(p[wk], randT(r, -1, 1, c.o*c.ckk).Data())
			}
			return p
		}
		want, got := slices.Clone(gw0), slices.Clone(gw0)
		g := convGeom{o: c.o, c: c.ckk, kh: 1, kw: 1, groups: 1}
		g.mergePartials(want, nil, parts(), make([][]float32, c.used), c.used, c.transposed)
		p := parts()
		mergeStackPartials(got, p, c.used, c.o, c.ckk, c.transposed)
		for wk := range p {
			if p[wk] != nil {
				t.Fatalf("%s: partial %d not handed back", name, wk)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: merged gradient differs from the serial merge", name)
		}
		if slices.Equal(got, gw0) {
			t.Errorf("%s: nothing merged", name)
		}
	}
}
