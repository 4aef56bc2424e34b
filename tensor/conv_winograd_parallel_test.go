package tensor

import (
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestWinogradWeightTransformsThreads checks that the weight transforms
// and the flipped weights, spread over 3 threads, are the same bits as
// one pass over every pair, for channel counts that are not a multiple of
// 16 and leave a partial last block of pairs.
func TestWinogradWeightTransformsThreads(t *testing.T) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(3))
	rng := NewRNG(5)
	for _, s := range [][2]int{{67, 70}, {1, 1}, {64, 64}, {5, 3000}} {
		o, c := s[0], s[1]
		w := randT(rng, -1, 1, o, c, 3, 3).Data()

		u := wgTransformWeights(w, o, c)
		want := make([]float32, 16*o*c)
		wgTransformPairs(want, w, o*c, 0, o*c)
		if !slices.Equal(u[:16*o*c], want) {
			t.Fatalf("%d×%d: transformed weights differ on 3 threads", o, c)
		}
		putBuf(u)

		oc := wgStride(o * c)
		du := randT(rng, -1, 1, 16*oc).Data()
		gw0 := randT(rng, -1, 1, o*c*9).Data()
		gw, wantGW := slices.Clone(gw0), slices.Clone(gw0)
		wgAddWeightGrad(gw, du, oc, o, c)
		wgAddWeightGradPairs(wantGW, du, oc, 0, o*c)
		if !slices.Equal(gw, wantGW) {
			t.Fatalf("%d×%d: weight gradient differs on 3 threads", o, c)
		}
		if slices.Equal(gw, gw0) {
			t.Fatalf("%d×%d: weight gradient not added to", o, c)
		}

		g := convGeom{c: c, o: o, kh: 3, kw: 3, groups: 1}
		wf := g.flippedWeights(w)
		for oi := range o {
			for ci := range c {
				for q := range 9 {
					if a, b := wf[(ci*o+oi)*9+8-q], w[(oi*c+ci)*9+q]; a != b {
						t.Fatalf("%d×%d: flipped weight (%d, %d, %d) = %v, want %v", o, c, ci, oi, 8-q, a, b)
					}
				}
			}
		}
		putBuf(wf)
	}
}
