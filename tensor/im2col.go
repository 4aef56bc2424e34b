package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// im2col is kernels.Im2col with a fast path for unit horizontal stride,
// where every output row of a column row is one contiguous run of an input
// row: it is copied whole instead of element by element with bounds checks.
// (In the CNN benchmark im2col and col2im were a third of the step.)
func im2col(x []float32, c, h, w, kh, kw, sh, sw, ph, pw int, col []float32) {
	if sw != 1 {
		kernels.Im2col(x, c, h, w, kh, kw, sh, sw, ph, pw, col)
		return
	}
	oh := (h+2*ph-kh)/sh + 1
	ow := w + 2*pw - kw + 1
	for ci := 0; ci < c; ci++ {
		img := x[ci*h*w : (ci+1)*h*w]
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				row := col[((ci*kh+i)*kw+j)*oh*ow : ((ci*kh+i)*kw+j+1)*oh*ow]
				// Output columns [lo, hi) read input columns lo+j−pw…
				lo, hi := max(pw-j, 0), min(ow, w+pw-j)
				for y := 0; y < oh; y++ {
					dst := row[y*ow : (y+1)*ow]
					iy := y*sh + i - ph
					if iy < 0 || iy >= h || lo >= hi {
						clear(dst)
						continue
					}
					clear(dst[:lo])
					copy(dst[lo:hi], img[iy*w+lo+j-pw:])
					clear(dst[hi:])
				}
			}
		}
	}
}

// col2im is kernels.Col2im with the same unit-stride fast path: each run is
// added back with one vector add.
func col2im(col []float32, c, h, w, kh, kw, sh, sw, ph, pw int, dx []float32) {
	if sw != 1 {
		kernels.Col2im(col, c, h, w, kh, kw, sh, sw, ph, pw, dx)
		return
	}
	oh := (h+2*ph-kh)/sh + 1
	ow := w + 2*pw - kw + 1
	for ci := 0; ci < c; ci++ {
		img := dx[ci*h*w : (ci+1)*h*w]
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				row := col[((ci*kh+i)*kw+j)*oh*ow : ((ci*kh+i)*kw+j+1)*oh*ow]
				lo, hi := max(pw-j, 0), min(ow, w+pw-j)
				if lo >= hi {
					continue
				}
				for y := 0; y < oh; y++ {
					iy := y*sh + i - ph
					if iy < 0 || iy >= h {
						continue
					}
					off := iy*w + lo + j - pw
					kernels.Add(img[off:off+hi-lo], row[y*ow+lo:y*ow+hi])
				}
			}
		}
	}
}
