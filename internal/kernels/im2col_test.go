package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// im2colRef and col2imRef are the reference loops of Im2col and Col2im.
func im2colRef(x []float32, c, h, w, kh, kw, sh, sw, ph, pw int, col []float32) {
	oh, ow := (h+2*ph-kh)/sh+1, (w+2*pw-kw)/sw+1
	for ci := 0; ci < c; ci++ {
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				for y := 0; y < oh; y++ {
					for xo := 0; xo < ow; xo++ {
						iy, ix := y*sh+i-ph, xo*sw+j-pw
						v := float32(0)
						if iy >= 0 && iy < h && ix >= 0 && ix < w {
							v = x[(ci*h+iy)*w+ix]
						}
						col[((ci*kh+i)*kw+j)*oh*ow+y*ow+xo] = v
					}
				}
			}
		}
	}
}

func col2imRef(col []float32, c, h, w, kh, kw, sh, sw, ph, pw int, dx []float32) {
	oh, ow := (h+2*ph-kh)/sh+1, (w+2*pw-kw)/sw+1
	for ci := 0; ci < c; ci++ {
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				for y := 0; y < oh; y++ {
					for xo := 0; xo < ow; xo++ {
						iy, ix := y*sh+i-ph, xo*sw+j-pw
						if iy >= 0 && iy < h && ix >= 0 && ix < w {
							dx[(ci*h+iy)*w+ix] += col[((ci*kh+i)*kw+j)*oh*ow+y*ow+xo]
						}
					}
				}
			}
		}
	}
}

var convShapes = [][9]int{
	// c, h, w, kh, kw, strideH, strideW, padH, padW
	{1, 28, 28, 3, 3, 1, 1, 0, 0},
	{32, 26, 26, 3, 3, 1, 1, 0, 0},
	{3, 7, 9, 3, 3, 1, 1, 1, 1},
	{2, 8, 8, 5, 5, 1, 1, 2, 2}, // padding wider than a border run
	{2, 9, 7, 3, 2, 2, 3, 1, 1}, // strided
	{1, 2, 2, 5, 5, 1, 1, 3, 3}, // kernel larger than image
	{4, 6, 5, 1, 1, 1, 1, 0, 0}, // 1×1
}

func TestIm2colCol2im(t *testing.T) {
	defer func(v *vecImpl) { vec = v }(vec)
	for _, impl := range vecImpls() {
		vec = impl
		testIm2colCol2im(t)
	}
}

func testIm2colCol2im(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, s := range convShapes {
		c, h, w, kh, kw, sh, sw, ph, pw := s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8]
		oh, ow := (h+2*ph-kh)/sh+1, (w+2*pw-kw)/sw+1
		x := randSlice(r, c*h*w)
		n := c * kh * kw * oh * ow
		got, want := randSlice(r, n), make([]float32, n)
		Im2col(x, c, h, w, kh, kw, sh, sw, ph, pw, got)
		im2colRef(x, c, h, w, kh, kw, sh, sw, ph, pw, want)
		checkSame(t, fmt.Sprint("Im2col ", s), n, got, want)

		col := randSlice(r, n)
		dx := randSlice(r, c*h*w)
		dxWant := append([]float32(nil), dx...)
		Col2im(col, c, h, w, kh, kw, sh, sw, ph, pw, dx)
		col2imRef(col, c, h, w, kh, kw, sh, sw, ph, pw, dxWant)
		checkSame(t, fmt.Sprint("Col2im ", s), len(dx), dx, dxWant)
	}
}

func BenchmarkIm2col(b *testing.B) {
	// The MNIST CNN's conv2: 32×26×26 input, 3×3 kernel.
	c, h, w := 32, 26, 26
	x := make([]float32, c*h*w)
	col := make([]float32, c*9*24*24)
	b.Run("im2col", func(b *testing.B) {
		for b.Loop() {
			Im2col(x, c, h, w, 3, 3, 1, 1, 0, 0, col)
		}
	})
	b.Run("im2colRef", func(b *testing.B) {
		for b.Loop() {
			im2colRef(x, c, h, w, 3, 3, 1, 1, 0, 0, col)
		}
	})
	b.Run("col2im", func(b *testing.B) {
		for b.Loop() {
			Col2im(col, c, h, w, 3, 3, 1, 1, 0, 0, x)
		}
	})
}
