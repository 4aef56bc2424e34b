package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// Convolutions on the im2col path whose output planes are small (ResNet's
// stride-2 convolutions down to 8×8 and 4×4 at CIFAR size, 3×3 and the
// 1×1 downsampling) would multiply one image's column matrix [ckk, p] at a
// time: products of p = 16 or 64 columns, a fraction of the GEMM kernels'
// 64-wide tiles, and a weight gradient whose inner dimension is p, so that
// every image reads and writes the whole dW for few multiply-adds. The
// column matrices of a stack of k images are instead laid side by side,
// [ckk, k·p], image b's columns at b·p: one product per stack forward, one
// for the input gradient, and one for the weight gradient with k·p as its
// inner dimension. Stacks are fixed by the image index (images s·k …
// s·k+k−1), not by the worker, so the output and the input gradient are
// the same bits on any number of threads. Results differ from the
// per-image products in rounding only.

// colStackConv switches the stacked im2col path on where it applies;
// tests turn it off to compare.
var colStackConv = true

// colStackCols is the most columns of a stack: two of the GEMM kernels'
// 64-wide tiles, the column matrix (ckk·128 floats, 1.2 MB for ResNet's
// 256→512 convolution) read once into the GEMM's packed panels.
const colStackCols = 128

// colStack returns how many images of g the im2col path multiplies in one
// product (1: one at a time): float32, one group, not a direct
// convolution (its columns are the image itself), planes of at most half
// of colStackCols.
func (g convGeom) colStack() int {
	if !colStackConv || g.bf16 || g.groups != 1 || g.direct() {
		return 1
	}
	return max(1, min(colStackCols/max(g.plane(), 1), g.n))
}

// colStackGemm returns the SGEMM for products inside a parallelFor over
// stacks of minStacks each: serial when that loop fills the threads, else
// split over them (the same bits either way; see withGemm).
func colStackGemm(stacks, minStacks int) gemmFunc {
	if t := kernels.NumThreads(); t > 1 && stacks/max(minStacks, 1) >= t {
		return kernels.SgemmSerial
	}
	return kernels.Sgemm
}

// stackColumns builds the column matrix [ckk, n] of images i0…i1−1 in col,
// image i's columns at (i−i0)·p, each built first in img [ckk, p].
func (g convGeom) stackColumns(xd []float32, i0, i1, n int, img, col []float32) {
	ckk, p := g.ckk(), g.plane()
	for i := i0; i < i1; i++ {
		kernels.Im2colRows(g.group(xd, i, 0), g.shape(), 0, g.oh, img[:ckk*p])
		kernels.CopyRows(false, col[(i-i0)*p:], n, img, p, ckk, p)
	}
}

// conv2dForwardColStack is conv2dForward with k images to a product.
func conv2dForwardColStack(g convGeom, k int, xd, wd []float32, b *Tensor, ep convEpilogue, out []float32, mask []byte, arg []int32) {
	ckk, p := g.ckk(), g.plane()
	outLen, mlen := g.outLen(ep), kernels.ReluMaskLen(g.o*p)
	stacks := (g.n + k - 1) / k
	minStacks := convMinFlops/max(2*g.o*ckk*k*p, 1) + 1
	sgemm := colStackGemm(stacks, minStacks)
	parallelFor(stacks, minStacks, func(_, lo, hi int) {
		img, col, y := getBuf(ckk*p), getBuf(ckk*k*p), getBuf(g.o*k*p)
		bufs := [][]float32{img, col, y}
		var ybuf []float32
		if ep == epReLUPool {
			ybuf = getBuf(g.o * p)
			bufs = append(bufs, ybuf)
		}
		defer putBufs(bufs)
		for s := lo; s < hi; s++ {
			i0, i1 := s*k, min((s+1)*k, g.n)
			n := (i1 - i0) * p
			g.stackColumns(xd, i0, i1, n, img, col)
			sgemm(false, false, g.o, n, ckk, 1, wd, ckk, col, n, 0, y, n)
			for i := i0; i < i1; i++ {
				yi := ybuf
				if ep != epReLUPool {
					yi = out[i*g.o*p : (i+1)*g.o*p]
				}
				src := y[(i-i0)*p:]
				if b == nil {
					kernels.CopyRows(false, yi, p, src, n, g.o, p)
				} else {
					// y + b, one rounding, as the per-image path adds it.
					for oc, bv := range b.data {
						kernels.RowsBias(yi[oc*p:], p, src[oc*n:], n, 1, p, bv)
					}
				}
				if ep == epNone {
					continue
				}
				if mask != nil {
					kernels.ReluMask(yi, yi, mask[i*mlen:(i+1)*mlen])
				} else {
					kernels.Relu(yi, yi)
				}
				if ep == epReLUPool {
					kernels.MaxPool2x2(yi, out[i*outLen:(i+1)*outLen], arg[i*outLen:(i+1)*outLen], g.o, g.oh, g.ow)
				}
			}
		}
	})
}

// conv2dBackwardColStack is conv2dBackward (without autocast) with k
// images to a product: per stack, the output gradients side by side
// [O, k·p], the weight gradient from them and the stack's columns, then
// the column gradient Wᵀ·G in the same buffer, folded back image by
// image. Workers sum dW (or dWᵀ) and db privately, as conv2dBackward's.
func conv2dBackwardColStack(g convGeom, k int, x, w, b *Tensor, xd, wd []float32, gradOf func(i int, buf []float32) []float32, bufLen int) {
	ckk, p := g.ckk(), g.plane()
	needX, needW, needB := x.needsGrad(), w.needsGrad(), b.needsGrad()
	var gx, gw, gb []float32
	freshX := false
	if needX {
		gx, freshX = x.gradDst()
	}
	if needW {
		gw = w.accGrad()
	}
	if needB {
		gb = b.accGrad()
	}
	transposed := g.o < ckk // as conv2dBackward: the smaller transpose
	stacks := (g.n + k - 1) / k
	minStacks := convMinFlops/max(4*g.o*ckk*k*p, 1) + 1
	sgemm := colStackGemm(stacks, minStacks)
	workers := min(kernels.NumThreads(), stacks)
	partialW := make([][]float32, workers)
	partialB := make([][]float32, workers)
	used := parallelFor(stacks, minStacks, func(worker, lo, hi int) {
		img, col, gs := getBuf(ckk*p), getBuf(ckk*k*p), getBuf(g.o*k*p)
		bufs := [][]float32{img, col, gs}
		var gbuf []float32
		if bufLen > 0 {
			gbuf = getBuf(bufLen)
			bufs = append(bufs, gbuf)
		}
		defer putBufs(bufs)
		dw := gw
		if needW && (transposed || worker > 0) {
			dw = zeroedBuf(len(gw))
			partialW[worker] = dw
		}
		db := gb
		if worker > 0 && needB {
			db = make([]float32, len(gb))
			partialB[worker] = db
		}
		for s := lo; s < hi; s++ {
			i0, i1 := s*k, min((s+1)*k, g.n)
			n := (i1 - i0) * p
			for i := i0; i < i1; i++ {
				gi := gradOf(i, gbuf)
				if needB {
					addBiasGrad(db, gi, p)
				}
				kernels.CopyRows(false, gs[(i-i0)*p:], n, gi, p, g.o, p)
			}
			if needW {
				g.stackColumns(xd, i0, i1, n, img, col)
				if transposed { // dWᵀ[ckk, O] += col[ckk, n] · Gᵀ
					sgemm(false, true, ckk, g.o, n, 1, col, n, gs, n, 1, dw, g.o)
				} else { // dW[O, ckk] += G[O, n] · colᵀ
					sgemm(false, true, g.o, ckk, n, 1, gs, n, col, n, 1, dw, ckk)
				}
			}
			if !needX {
				continue
			}
			sgemm(true, false, ckk, n, g.o, 1, wd, ckk, gs, n, 0, col, n)
			for i := i0; i < i1; i++ {
				dxi := g.group(gx, i, 0)
				if freshX {
					clear(dxi)
				}
				kernels.CopyRows(false, img, p, col[(i-i0)*p:], n, ckk, p)
				kernels.Col2imRows(img[:ckk*p], g.shape(), 0, g.oh, dxi)
			}
		}
	})
	mergeStackPartials(gw, partialW, used, g.o, ckk, transposed)
	g.mergePartials(gw, gb, partialW, partialB, used, transposed)
}

// mergeStackPartials adds the private weight gradients of the first used
// workers (dW [o, ckk], or dWᵀ [ckk, o] if transposed) into gw [o, ckk]
// and recycles them, clearing partialW. Each element takes the workers'
// sums in worker order, as mergePartials adds them, so rows of gw go to
// the threads (a serial merge of 256→512's dWᵀ would idle all but one)
// with the same result on any number.
func mergeStackPartials(gw []float32, partialW [][]float32, used, o, ckk int, transposed bool) {
	if gw == nil {
		return
	}
	parts := partialW[:used]
	parallelFor(o, max(1, (1<<15)/max(ckk*used, 1)), func(_, lo, hi int) {
		for _, dw := range parts {
			switch {
			case dw == nil:
			case transposed:
				addTransposedRows(gw, dw, o, ckk, lo, hi)
			default:
				addTo(gw[lo*ckk:hi*ckk], dw[lo*ckk:hi*ckk])
			}
		}
	})
	for wk, dw := range parts {
		if dw != nil {
			putBuf(dw)
			partialW[wk] = nil
		}
	}
}

// addTransposedRows is addTransposed (src [cols, rows] into dst [rows,
// cols]) for dst's rows r0…r1−1, a block of source rows at a time.
func addTransposedRows(dst, src []float32, rows, cols, r0, r1 int) {
	for j0 := 0; j0 < cols; j0 += convTransposeBlock {
		j1 := min(j0+convTransposeBlock, cols)
		for r := r0; r < r1; r++ {
			d := dst[r*cols+j0 : r*cols+j1]
			for j := range d {
				d[j] += src[(j0+j)*rows+r]
			}
		}
	}
}
