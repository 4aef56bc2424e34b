package kernels

import "fmt"

// MaxPool2x2 is 2-d max pooling with a 2×2 window, stride 2 and no padding
// over planes consecutive planes of h×w floats in src: dst receives the
// planes×oh×ow maxima (oh = h/2, ow = w/2) and arg, for each, the index
// within its plane of the element chosen. Within a window the elements are
// visited top-left, top-right, bottom-left, bottom-right and the first
// maximum wins; a NaN wins over any number and the first NaN stays
// (PyTorch's rule: take v if v > best or v is NaN).
//
// Reference loop (per plane, output (y, x), window elements v_k at plane
// index i_k in the order above):
//
//	best, bi := v_0, i_0
//	for k := 1; k < 4; k++ {
//		if v_k > best || (v_k != v_k && best == best) { best, bi = v_k, i_k }
//	}
//	dst[y*ow+x], arg[y*ow+x] = best, bi
func MaxPool2x2(src, dst []float32, arg []int32, planes, h, w int) {
	oh, ow := h/2, w/2
	checkPool("MaxPool2x2", len(src), len(dst), len(arg), planes, h, w)
	if oh == 0 || ow == 0 {
		return
	}
	for p := 0; p < planes; p++ {
		s, d, a := src[p*h*w:(p+1)*h*w], dst[p*oh*ow:(p+1)*oh*ow], arg[p*oh*ow:(p+1)*oh*ow]
		if f := vec.maxPool2x2; f != nil {
			f(&s[0], &d[0], &a[0], w, oh, ow)
		} else {
			maxPool2x2Generic(s, d, a, w, oh, ow)
		}
	}
}

// MaxPool2x2Backward is MaxPool2x2's adjoint: for every output j of each
// plane it adds grad[j] to gx at the plane index arg[j] (which must be one
// of j's window, as MaxPool2x2 chose). Unless add, gx is overwritten
// instead: set to that sum over a gx of zeros, without reading it (for a
// gradient buffer not yet cleared). The vector kernel adds +0 to the other
// three elements of each window.
func MaxPool2x2Backward(gx, grad []float32, arg []int32, planes, h, w int, add bool) {
	oh, ow := h/2, w/2
	checkPool("MaxPool2x2Backward", len(gx), len(grad), len(arg), planes, h, w)
	if !add && (oh == 0 || ow == 0 || h%2 != 0 || w%2 != 0) {
		// Rows and columns outside every window get no gradient.
		clear(gx[:planes*h*w])
		add = true
	}
	if oh == 0 || ow == 0 {
		return
	}
	f := vec.maxPool2x2Backward
	if !add {
		f = vec.maxPool2x2BackwardSet
	}
	for p := 0; p < planes; p++ {
		x, g, a := gx[p*h*w:(p+1)*h*w], grad[p*oh*ow:(p+1)*oh*ow], arg[p*oh*ow:(p+1)*oh*ow]
		switch {
		case f != nil:
			f(&x[0], &g[0], &a[0], w, oh, ow)
		case !add:
			clear(x)
			fallthrough
		default:
			maxPool2x2BackwardGeneric(x, g, a, w, oh, ow)
		}
	}
}

func checkPool(op string, nx, ny, narg, planes, h, w int) {
	if planes < 0 || h < 0 || w < 0 || nx < planes*h*w || ny < planes*(h/2)*(w/2) || narg < planes*(h/2)*(w/2) {
		panic(fmt.Sprintf("kernels: %s: buffers of %d, %d and %d elements too short for %d planes of %dx%d", op, nx, ny, narg, planes, h, w))
	}
}

// maxPool2x2Generic is MaxPool2x2 on one plane. It is written without
// data-dependent branches (the updates compile to conditional moves):
// which element of a window is largest is a coin toss the branch predictor
// loses.
func maxPool2x2Generic(src, dst []float32, arg []int32, w, oh, ow int) {
	for oy := 0; oy < oh; oy++ {
		r0 := src[2*oy*w : 2*oy*w+2*ow]
		r1 := src[(2*oy+1)*w : (2*oy+1)*w+2*ow]
		d := dst[oy*ow : (oy+1)*ow]
		a := arg[oy*ow : (oy+1)*ow]
		base := int32(2 * oy * w)
		for ox := range d {
			x0 := 2 * ox
			i := base + int32(x0)
			m := r0[x0]
			if v := r0[x0+1]; v > m || (v != v && m == m) {
				m, i = v, base+int32(x0+1)
			}
			if v := r1[x0]; v > m || (v != v && m == m) {
				m, i = v, base+int32(w+x0)
			}
			if v := r1[x0+1]; v > m || (v != v && m == m) {
				m, i = v, base+int32(w+x0+1)
			}
			d[ox] = m
			a[ox] = i
		}
	}
}

// maxPool2x2BackwardGeneric is MaxPool2x2Backward on one plane.
func maxPool2x2BackwardGeneric(gx, grad []float32, arg []int32, w, oh, ow int) {
	for j, i := range arg[:oh*ow] {
		gx[i] += grad[j]
	}
}
