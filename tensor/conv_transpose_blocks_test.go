package tensor

import "testing"

// TestConvTransposeBlocks checks addTransposed and tapMajor against the
// element-by-element loops they replace, on sizes that are and are not
// multiples of the block.
func TestConvTransposeBlocks(t *testing.T) {
	rng := NewRNG(5)
	for _, sz := range [][3]int{{1, 1, 1}, {16, 3, 9}, {17, 5, 9}, {40, 33, 1}, {7, 64, 4}} {
		og, cg, kk := sz[0], sz[1], sz[2]
		src := randT(rng, -1, 1, og*cg*kk).Data()
		dst0 := randT(rng, -1, 1, og*cg*kk).Data()

		// addTransposed: dst [og, cg·kk] += src [cg·kk, og]ᵀ.
		got, want := append([]float32(nil), dst0...), append([]float32(nil), dst0...)
		addTransposed(got, src, og, cg*kk)
		for r := range og {
			for j := range cg * kk {
				want[r*cg*kk+j] += src[j*og+r]
			}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("addTransposed %v: [%d] = %v, want %v", sz, i, got[i], want[i])
			}
		}

		// tapMajor: [og, (c, t)] → [(t, c), og].
		got = append([]float32(nil), dst0...)
		tapMajor(got, src, og, cg, kk)
		for o := range og {
			for c := range cg {
				for tp := range kk {
					if g, w := got[(tp*cg+c)*og+o], src[(o*cg+c)*kk+tp]; g != w {
						t.Fatalf("tapMajor %v: o %d c %d tap %d = %v, want %v", sz, o, c, tp, g, w)
					}
				}
			}
		}
	}
}
