package tensor

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestIm2colMatchesKernels checks the unit-stride fast paths against the
// reference kernels over strides, paddings and kernels wider than the input.
func TestIm2colMatchesKernels(t *testing.T) {
	rng := NewRNG(14)
	for _, c := range []struct{ c, h, w, kh, kw, sh, sw, ph, pw int }{
		{2, 5, 6, 3, 3, 1, 1, 0, 0},
		{2, 5, 6, 3, 3, 1, 1, 1, 1},
		{1, 7, 5, 3, 2, 2, 1, 1, 0},
		{3, 4, 4, 1, 1, 1, 1, 0, 0},
		{1, 3, 2, 3, 3, 1, 1, 2, 2}, // padding wider than the image
		{1, 6, 6, 3, 3, 2, 2, 1, 1}, // falls back to the kernels
	} {
		name := fmt.Sprintf("%+v", c)
		oh := (c.h+2*c.ph-c.kh)/c.sh + 1
		ow := (c.w+2*c.pw-c.kw)/c.sw + 1
		x := Randn(rng, c.c*c.h*c.w).Data()
		n := c.c * c.kh * c.kw * oh * ow
		want, got := make([]float32, n), make([]float32, n)
		for i := range got {
			got[i] = 99 // stale values must be overwritten
		}
		kernels.Im2col(x, c.c, c.h, c.w, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, want)
		im2col(x, c.c, c.h, c.w, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, got)
		if !slices.Equal(got, want) {
			t.Errorf("im2col %s differs from kernels.Im2col", name)
		}
		col := Randn(rng, n).Data()
		dwant, dgot := make([]float32, len(x)), make([]float32, len(x))
		for i := range dwant {
			dwant[i], dgot[i] = 1, 1 // accumulates
		}
		kernels.Col2im(col, c.c, c.h, c.w, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, dwant)
		col2im(col, c.c, c.h, c.w, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, dgot)
		for i := range dwant {
			if d := dgot[i] - dwant[i]; d > 1e-5 || d < -1e-5 {
				t.Errorf("col2im %s [%d] = %v, want %v", name, i, dgot[i], dwant[i])
				break
			}
		}
	}
}
