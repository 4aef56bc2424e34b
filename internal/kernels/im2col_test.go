package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// im2colRef and col2imRef are the reference loops of Im2col and Col2im.
func im2colRef(x []float32, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw int, col []float32) {
	oh, ow := (h+2*ph-dh*(kh-1)-1)/sh+1, (w+2*pw-dw*(kw-1)-1)/sw+1
	for ci := 0; ci < c; ci++ {
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				for y := 0; y < oh; y++ {
					for xo := 0; xo < ow; xo++ {
						iy, ix := y*sh+i*dh-ph, xo*sw+j*dw-pw
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

func col2imRef(col []float32, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw int, dx []float32) {
	oh, ow := (h+2*ph-dh*(kh-1)-1)/sh+1, (w+2*pw-dw*(kw-1)-1)/sw+1
	for ci := 0; ci < c; ci++ {
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				for y := 0; y < oh; y++ {
					for xo := 0; xo < ow; xo++ {
						iy, ix := y*sh+i*dh-ph, xo*sw+j*dw-pw
						if iy >= 0 && iy < h && ix >= 0 && ix < w {
							dx[(ci*h+iy)*w+ix] += col[((ci*kh+i)*kw+j)*oh*ow+y*ow+xo]
						}
					}
				}
			}
		}
	}
}

var convShapes = [][11]int{
	// c, h, w, kh, kw, strideH, strideW, padH, padW, dilH, dilW
	{1, 28, 28, 3, 3, 1, 1, 0, 0, 1, 1},
	{32, 26, 26, 3, 3, 1, 1, 0, 0, 1, 1},
	{3, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1},
	{2, 8, 8, 5, 5, 1, 1, 2, 2, 1, 1},  // padding wider than a border run
	{2, 9, 7, 3, 2, 2, 3, 1, 1, 1, 1},  // strided
	{1, 2, 2, 5, 5, 1, 1, 3, 3, 1, 1},  // kernel larger than image
	{4, 6, 5, 1, 1, 1, 1, 0, 0, 1, 1},  // 1×1
	{3, 9, 10, 3, 3, 1, 1, 2, 2, 2, 2}, // dilated
	{2, 11, 9, 3, 2, 2, 1, 1, 0, 3, 2}, // dilated and strided, rows and columns apart
	{2, 7, 12, 2, 3, 1, 2, 0, 3, 1, 3}, // dilated columns only, padding wider than the taps
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
		c, h, w, kh, kw, sh, sw, ph, pw, dh, dw := s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10]
		oh, ow := ConvOut(h, kh, sh, ph, dh), ConvOut(w, kw, sw, pw, dw)
		x := randSlice(r, c*h*w)
		n := c * kh * kw * oh * ow
		got, want := randSlice(r, n), make([]float32, n)
		if dh == 1 && dw == 1 {
			Im2col(x, c, h, w, kh, kw, sh, sw, ph, pw, got)
		} else {
			Im2colDilated(x, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, got)
		}
		im2colRef(x, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, want)
		checkSame(t, fmt.Sprint("Im2col ", s), n, got, want)

		col := randSlice(r, n)
		dx := randSlice(r, c*h*w)
		dxWant := append([]float32(nil), dx...)
		if dh == 1 && dw == 1 {
			Col2im(col, c, h, w, kh, kw, sh, sw, ph, pw, dx)
		} else {
			Col2imDilated(col, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, dx)
		}
		col2imRef(col, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, dxWant)
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
			im2colRef(x, c, h, w, 3, 3, 1, 1, 0, 0, 1, 1, col)
		}
	})
	b.Run("col2im", func(b *testing.B) {
		for b.Loop() {
			Col2im(col, c, h, w, 3, 3, 1, 1, 0, 0, x)
		}
	})
}

// TestIm2colRows checks that the row-block kernels give the block's
// columns of the whole column matrix, and that Col2imRows over blocks
// adds up to Col2im of the whole (up to summation order).
func TestIm2colRows(t *testing.T) {
	defer func(v *vecImpl) { vec = v }(vec)
	r := rand.New(rand.NewPCG(13, 14))
	for _, impl := range vecImpls() {
		vec = impl
		for _, sh := range convShapes {
			s := ConvShape{C: sh[0], H: sh[1], W: sh[2], KH: sh[3], KW: sh[4], StrideH: sh[5], StrideW: sh[6], PadH: sh[7], PadW: sh[8], DilH: sh[9], DilW: sh[10]}
			oh, ow, ckk := s.OH(), s.OW(), s.C*s.KH*s.KW
			x := randSlice(r, s.C*s.H*s.W)
			full := make([]float32, ckk*oh*ow)
			im2colRef(x, s.C, s.H, s.W, s.KH, s.KW, s.StrideH, s.StrideW, s.PadH, s.PadW, s.DilH, s.DilW, full)
			gcol := randSlice(r, ckk*oh*ow)
			want := make([]float32, len(x))
			col2imRef(gcol, s.C, s.H, s.W, s.KH, s.KW, s.StrideH, s.StrideW, s.PadH, s.PadW, s.DilH, s.DilW, want)
			for _, rows := range []int{1, 2, 3, oh} {
				got := make([]float32, len(x))
				for r0 := 0; r0 < oh; r0 += rows {
					r1 := min(r0+rows, oh)
					n := (r1 - r0) * ow
					blk := randSlice(r, ckk*n) // garbage Im2colRows must overwrite
					col := make([]float32, ckk*n)
					for q := 0; q < ckk; q++ {
						copy(col[q*n:(q+1)*n], gcol[q*oh*ow+r0*ow:q*oh*ow+r1*ow]) // the block's gradient
					}
					Im2colRows(x, s, r0, r1, blk)
					for q := range blk {
						if blk[q] != full[(q/n)*oh*ow+r0*ow+q%n] {
							t.Fatalf("%s %v rows [%d,%d): Im2colRows[%d] = %v, want %v", impl.name, sh, r0, r1, q, blk[q], full[(q/n)*oh*ow+r0*ow+q%n])
						}
					}
					Col2imRows(col, s, r0, r1, got)
				}
				for i := range got {
					if d := got[i] - want[i]; d > 1e-5 || d < -1e-5 {
						t.Fatalf("%s %v blocks of %d rows: Col2imRows dx[%d] = %v, want %v", impl.name, sh, rows, i, got[i], want[i])
					}
				}
			}
		}
	}
}
