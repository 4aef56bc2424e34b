package kernels

// Im2col unrolls one image x of shape [c,h,w] into col of shape
// [c*kh*kw, oh*ow], rows ordered (c, kh, kw) like PyTorch's Conv2d weight,
// where oh = (h+2·padH−kh)/strideH+1 and likewise ow. Padding reads as 0.
//
// Reference loop:
//
//	col[((ci*kh+i)*kw+j)*oh*ow + y*ow + x] = x[ci, y*strideH+i-padH, x*strideW+j-padW]
func Im2col(x []float32, c, h, w, kh, kw, strideH, strideW, padH, padW int, col []float32) {
	oh := (h+2*padH-kh)/strideH + 1
	ow := (w+2*padW-kw)/strideW + 1
	for ci := 0; ci < c; ci++ {
		img := x[ci*h*w : (ci+1)*h*w]
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				row := col[((ci*kh+i)*kw+j)*oh*ow:]
				for y := 0; y < oh; y++ {
					iy := y*strideH + i - padH
					dst := row[y*ow : (y+1)*ow]
					if iy < 0 || iy >= h {
						clear(dst)
						continue
					}
					src := img[iy*w : (iy+1)*w]
					for xo := range dst {
						ix := xo*strideW + j - padW
						if ix < 0 || ix >= w {
							dst[xo] = 0
						} else {
							dst[xo] = src[ix]
						}
					}
				}
			}
		}
	}
}

// Col2im is the adjoint of Im2col: it adds each entry of col back into the
// image gradient dx of shape [c,h,w] (accumulating; padding is dropped).
func Col2im(col []float32, c, h, w, kh, kw, strideH, strideW, padH, padW int, dx []float32) {
	oh := (h+2*padH-kh)/strideH + 1
	ow := (w+2*padW-kw)/strideW + 1
	for ci := 0; ci < c; ci++ {
		img := dx[ci*h*w : (ci+1)*h*w]
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				row := col[((ci*kh+i)*kw+j)*oh*ow:]
				for y := 0; y < oh; y++ {
					iy := y*strideH + i - padH
					if iy < 0 || iy >= h {
						continue
					}
					src := row[y*ow : (y+1)*ow]
					dst := img[iy*w : (iy+1)*w]
					for xo, v := range src {
						ix := xo*strideW + j - padW
						if ix >= 0 && ix < w {
							dst[ix] += v
						}
					}
				}
			}
		}
	}
}
