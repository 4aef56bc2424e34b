package kernels

import "fmt"

// Im2col unrolls one image x of shape [c,h,w] into col of shape
// [c*kh*kw, oh*ow], rows ordered (c, kh, kw) like PyTorch's Conv2d weight,
// where oh = (h+2·padH−kh)/strideH+1 and likewise ow. Padding reads as 0.
//
// Reference loop:
//
//	col[((ci*kh+i)*kw+j)*oh*ow + y*ow + x] = x[ci, y*strideH+i-padH, x*strideW+j-padW]
func Im2col(x []float32, c, h, w, kh, kw, strideH, strideW, padH, padW int, col []float32) {
	Im2colDilated(x, c, h, w, kh, kw, strideH, strideW, padH, padW, 1, 1, col)
}

// ConvOut is a convolution's output size along one axis: (size + 2·pad −
// dil·(k−1) − 1)/stride + 1, PyTorch's formula.
func ConvOut(size, k, stride, pad, dil int) int {
	return (size+2*pad-dil*(k-1)-1)/stride + 1
}

// Im2colDilated is Im2col with the kernel's taps dilH rows and dilW
// columns apart (PyTorch's dilation), so oh = ConvOut(h, kh, strideH,
// padH, dilH) and likewise ow.
//
// Reference loop:
//
//	col[((ci*kh+i)*kw+j)*oh*ow + y*ow + x] = x[ci, y*strideH+i*dilH-padH, x*strideW+j*dilW-padW]
func Im2colDilated(x []float32, c, h, w, kh, kw, strideH, strideW, padH, padW, dilH, dilW int, col []float32) {
	s := ConvShape{C: c, H: h, W: w, KH: kh, KW: kw, StrideH: strideH, StrideW: strideW, PadH: padH, PadW: padW, DilH: dilH, DilW: dilW}
	Im2colRows(x, s, 0, s.OH(), col)
}

// ConvShape is one image's convolution geometry: C channels of H×W, a
// KH×KW kernel, strides, padding and dilation (at least 1).
type ConvShape struct {
	C, H, W, KH, KW                          int
	StrideH, StrideW, PadH, PadW, DilH, DilW int
}

// OH is the output height, ConvOut(H, KH, StrideH, PadH, DilH).
func (s ConvShape) OH() int { return ConvOut(s.H, s.KH, s.StrideH, s.PadH, s.DilH) }

// OW is the output width.
func (s ConvShape) OW() int { return ConvOut(s.W, s.KW, s.StrideW, s.PadW, s.DilW) }

// Im2colRows is Im2colDilated for the output rows r0..r1−1 only: col is
// [C·KH·KW, (r1−r0)·OW], the columns of those rows. A convolution built
// from blocks of rows keeps its column matrix small enough for L2.
func Im2colRows(x []float32, s ConvShape, r0, r1 int, col []float32) {
	oh, ow := s.OH(), s.OW()
	if r0 < 0 || r1 > oh || r0 > r1 {
		panic(fmt.Sprintf("kernels: Im2colRows: rows [%d, %d) outside the %d output rows", r0, r1, oh))
	}
	c, h, w, kh, kw := s.C, s.H, s.W, s.KH, s.KW
	strideH, strideW, padH, padW, dilH, dilW := s.StrideH, s.StrideW, s.PadH, s.PadW, s.DilH, s.DilW
	ps := (r1 - r0) * ow // one plane of col
	for ci := 0; ci < c; ci++ {
		img := x[ci*h*w : (ci+1)*h*w]
		for i := 0; i < kh; i++ {
			y0, y1 := validRange(oh, strideH, h, i*dilH-padH)
			y0, y1 = clampRange(y0, y1, r0, r1)
			for j := 0; j < kw; j++ {
				plane := col[((ci*kh+i)*kw+j)*ps : ((ci*kh+i)*kw+j+1)*ps]
				clear(plane[:(y0-r0)*ow])
				clear(plane[(y1-r0)*ow:])
				if y0 >= y1 {
					continue
				}
				if strideW == 1 {
					// Valid rows are one strided block: zero the padded
					// columns, copy the rest in one call.
					x0, x1 := validRange(ow, 1, w, j*dilW-padW)
					if x0 > 0 || x1 < ow {
						for y := y0 - r0; y < y1-r0; y++ {
							clear(plane[y*ow : y*ow+x0])
							clear(plane[y*ow+x1 : (y+1)*ow])
						}
					}
					iy0 := y0*strideH + i*dilH - padH
					copyRows(false, plane[(y0-r0)*ow+x0:], ow, img[iy0*w+x0+j*dilW-padW:], strideH*w, y1-y0, x1-x0)
					continue
				}
				for y := y0; y < y1; y++ {
					iy := y*strideH + i*dilH - padH
					src := img[iy*w : (iy+1)*w]
					dst := plane[(y-r0)*ow : (y-r0+1)*ow]
					for xo := range dst {
						ix := xo*strideW + j*dilW - padW
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

// clampRange restricts [o0, o1) to [r0, r1), empty (o0 = o1) if they do
// not meet.
func clampRange(o0, o1, r0, r1 int) (int, int) {
	o0, o1 = min(max(o0, r0), r1), min(max(o1, r0), r1)
	return o0, max(o0, o1)
}

// Col2im is the adjoint of Im2col: it adds each entry of col back into the
// image gradient dx of shape [c,h,w] (accumulating; padding is dropped).
func Col2im(col []float32, c, h, w, kh, kw, strideH, strideW, padH, padW int, dx []float32) {
	Col2imDilated(col, c, h, w, kh, kw, strideH, strideW, padH, padW, 1, 1, dx)
}

// Col2imDilated is the adjoint of Im2colDilated (accumulating into dx).
func Col2imDilated(col []float32, c, h, w, kh, kw, strideH, strideW, padH, padW, dilH, dilW int, dx []float32) {
	s := ConvShape{C: c, H: h, W: w, KH: kh, KW: kw, StrideH: strideH, StrideW: strideW, PadH: padH, PadW: padW, DilH: dilH, DilW: dilW}
	Col2imRows(col, s, 0, s.OH(), dx)
}

// Col2imRows is the adjoint of Im2colRows: col holds the columns of the
// output rows r0..r1−1, added into dx.
func Col2imRows(col []float32, s ConvShape, r0, r1 int, dx []float32) {
	oh, ow := s.OH(), s.OW()
	if r0 < 0 || r1 > oh || r0 > r1 {
		panic(fmt.Sprintf("kernels: Col2imRows: rows [%d, %d) outside the %d output rows", r0, r1, oh))
	}
	c, h, w, kh, kw := s.C, s.H, s.W, s.KH, s.KW
	strideH, strideW, padH, padW, dilH, dilW := s.StrideH, s.StrideW, s.PadH, s.PadW, s.DilH, s.DilW
	ps := (r1 - r0) * ow
	var masks []uint16
	var masks8 []int32
	// The vector kernels shift each of the kw planes by one column more
	// than the last: adjacent taps only.
	if strideW == 1 && dilW == 1 && ps > 0 && c > 0 {
		switch {
		case vec.col2imRows != nil:
			masks = col2imMasks(w, ow, kw, padW)
		case vec.col2imRows8 != nil && w >= 8:
			masks8 = col2imMasks8(w, ow, kw, padW)
		}
		_ = col[c*kh*kw*ps-1]
		_ = dx[c*h*w-1]
	}
	for ci := 0; ci < c; ci++ {
		img := dx[ci*h*w : (ci+1)*h*w]
		for i := 0; i < kh; i++ {
			y0, y1 := validRange(oh, strideH, h, i*dilH-padH)
			y0, y1 = clampRange(y0, y1, r0, r1)
			if y0 >= y1 {
				continue
			}
			if masks != nil {
				// Reads plane rows y0..y1 of the kw planes of (ci, i) and
				// writes image rows iy0, iy0+strideH, ...: all inside the
				// slices checked above.
				iy0 := y0*strideH + i*dilH - padH
				vec.col2imRows(&img[iy0*w], strideH*w, &col[((ci*kh+i)*kw)*ps+(y0-r0)*ow], ow, ps, padW, kw, y1-y0, len(masks)/(kw+1), &masks[0])
				continue
			}
			if masks8 != nil {
				// As above for the whole 8-column chunks; the rest of each
				// row here, adding the planes in the same order.
				iy0 := y0*strideH + i*dilH - padH
				src := col[((ci*kh+i)*kw)*ps:]
				vec.col2imRows8(&img[iy0*w], strideH*w, &src[(y0-r0)*ow], ow, ps, padW, kw, y1-y0, w/8, &masks8[0])
				for y := y0; y < y1; y++ {
					row := img[(y*strideH+i*dilH-padH)*w:][:w]
					for t := w &^ 7; t < w; t++ {
						acc := row[t]
						for j := 0; j < kw; j++ {
							if x := t - j + padW; x >= 0 && x < ow {
								acc += src[j*ps+(y-r0)*ow+x]
							}
						}
						row[t] = acc
					}
				}
				continue
			}
			for j := 0; j < kw; j++ {
				plane := col[((ci*kh+i)*kw+j)*ps : ((ci*kh+i)*kw+j+1)*ps]
				if strideW == 1 {
					x0, x1 := validRange(ow, 1, w, j*dilW-padW)
					iy0 := y0*strideH + i*dilH - padH
					copyRows(true, img[iy0*w+x0+j*dilW-padW:], strideH*w, plane[(y0-r0)*ow+x0:], ow, y1-y0, x1-x0)
					continue
				}
				for y := y0; y < y1; y++ {
					iy := y*strideH + i*dilH - padH
					src := plane[(y-r0)*ow : (y-r0+1)*ow]
					dst := img[iy*w : (iy+1)*w]
					for xo, v := range src {
						ix := xo*strideW + j*dilW - padW
						if ix >= 0 && ix < w {
							dst[ix] += v
						}
					}
				}
			}
		}
	}
}

// col2imMasks8 returns, for each whole 8-column chunk of an image row of
// width w, for each kernel column j, 8 int32 lanes: −1 where the source
// column t−j+padW lies in [0,ow), else 0.
func col2imMasks8(w, ow, kw, padW int) []int32 {
	masks := make([]int32, 0, (w/8)*kw*8)
	for t0 := 0; t0+8 <= w; t0 += 8 {
		for j := 0; j < kw; j++ {
			for l := 0; l < 8; l++ {
				var m int32
				if x := t0 + l - j + padW; x >= 0 && x < ow {
					m = -1
				}
				masks = append(masks, m)
			}
		}
	}
	return masks
}

// validRange returns the outputs [o0,o1) of n whose input o·stride+off
// lies inside [0,size).
func validRange(n, stride, size, off int) (o0, o1 int) {
	// o·stride+off ≥ 0  ⇔  o ≥ ceil(−off/stride)
	if off < 0 {
		o0 = (-off + stride - 1) / stride
	}
	// o·stride+off ≤ size−1  ⇔  o ≤ floor((size−1−off)/stride)
	if size-1-off < 0 {
		o1 = 0
	} else {
		o1 = (size-1-off)/stride + 1
	}
	o0 = min(o0, n)
	o1 = max(min(o1, n), o0)
	return o0, o1
}

// col2imMasks returns, for each 16-column chunk of an image row of width w,
// the mask of columns t < w followed by, for each kernel column j, the mask
// of columns whose source column t−j+padW lies in [0,ow).
func col2imMasks(w, ow, kw, padW int) []uint16 {
	chunks := (w + 15) / 16
	masks := make([]uint16, 0, chunks*(kw+1))
	for t0 := 0; t0 < w; t0 += 16 {
		var m uint16
		for l := 0; l < 16 && t0+l < w; l++ {
			m |= 1 << l
		}
		masks = append(masks, m)
		for j := 0; j < kw; j++ {
			var mj uint16
			for l := 0; l < 16 && t0+l < w; l++ {
				if x := t0 + l - j + padW; x >= 0 && x < ow {
					mj |= 1 << l
				}
			}
			masks = append(masks, mj)
		}
	}
	return masks
}
