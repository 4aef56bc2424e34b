package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// Implicit-GEMM convolution (stride 1): the products read the image
// through a table of row offsets instead of an im2col matrix. On the
// image's (padded) planes of width wp, the column matrix's row for
// channel ci and tap (i, j) is the plane data from ci·hp·wp + i·dh·wp +
// j·dw on, if output pixel (y, x) is counted as column y·wp + x: each
// output row then has wp − ow columns more than it needs, computed and
// dropped where a product cannot skip them (the input gradient's, and
// the forward one's for rows of fewer than 16 pixels). Those ~8% more
// multiply-adds (a 3×3 kernel on 24 of 26 columns) cost less than writing
// and reading the im2col matrix:
//
//   - forward: Y[og, n'] = W[og, ckk] · X(taps), then the wanted columns
//     are copied out with the bias (kernels.SgemmOffsetB); output rows of
//     16 pixels or more are gathered without the dropped columns instead,
//     straight into the output (kernels.SgemmOffsetBGrid);
//   - weight gradient: dWᵀ[ckk, og] += X(taps) · Gᵀ, the taps' rows
//     read an output row's pixels at a time, skipping the dropped columns
//     (kernels.SgemmAddOffsetASegments);
//   - input gradient: the column gradient W'ᵀ[(i, j, c), og] · G' on the
//     wp-wide columns (G' the output gradient there, zero in the dropped
//     ones), each row added as it is stored into the (padded) input
//     gradient at its tap's offset (kernels.SgemmAddOffsetC): col2im
//     without the column matrix; the dropped columns add zeros.
//
// Results differ from the im2col path's in rounding only: the forward
// sums run in the same order but in other k blocks (one of 288 steps, not
// 256 and 32), the gradients' in another order. The fused and unfused ops
// take the same path, so they still agree bit for bit.

// implicitConv switches the implicit-GEMM path on where it applies; the
// tests turn it off to compare with the im2col path.
var implicitConv = true

// implicitForwardMinK is the shortest weight row (cg·kh·kw) whose forward
// product runs as an implicit GEMM. Below it (the 1→32 first layer's 9)
// the tiles' fixed cost outweighs the few multiply-adds each, and the
// im2col matrix is small: the im2col forward measured faster there. The
// backward runs implicit regardless. (A variable for the tests.)
var implicitForwardMinK = 32

// implicit reports whether g runs as an implicit GEMM when its images
// are spread over goroutines with minItems each: stride 1, a kernel
// larger than 1×1 (a 1×1 one needs no im2col anyway), the CPU's kernels
// present, and either one thread or enough images to fill them all (the
// implicit products run on one goroutine each).
func (g convGeom) implicit(minItems int) bool {
	if !implicitConv || g.bf16 || !kernels.ImplicitConv() || g.sh != 1 || g.sw != 1 || g.direct() {
		return false
	}
	t := kernels.NumThreads()
	return t == 1 || g.n/max(minItems, 1) >= t
}

// tapGeom is the layout of the implicit products of one convolution.
type tapGeom struct {
	hp, wp int                // padded plane
	cols   int                // columns n' = (oh−1)·wp + ow of the implicit products
	taps   kernels.RowOffsets // row (c, i, j): c·hp·wp + i·dh·wp + j·dw
}

func (g convGeom) tapGeom() tapGeom {
	t := tapGeom{hp: g.h + 2*g.ph, wp: g.w + 2*g.pw}
	t.cols = (g.oh-1)*t.wp + g.ow
	offs := make([]int, 0, g.ckk())
	for ci := range g.cg() {
		for i := range g.kh {
			for j := range g.kw {
				offs = append(offs, ci*t.hp*t.wp+i*g.dh*t.wp+j*g.dw)
			}
		}
	}
	t.taps = kernels.NewRowOffsets(offs)
	return t
}

// srcLen is the length of a padded source buffer: the group's planes and
// the slack the forward product may read past them.
func (t tapGeom) srcLen(g convGeom) int { return g.cg()*t.hp*t.wp + kernels.OffsetBSlack }

// source returns image i's channel group grp as the taps read it, need
// elements from its start: x itself when it is not padded and that many
// elements follow, else a copy in buf, whose padding must be zero (buf's
// padding is never written, so a buffer cleared once serves every image).
func (t tapGeom) source(g convGeom, x []float32, i, grp, need int, buf []float32) []float32 {
	start := i*g.inSize() + grp*g.cg()*g.h*g.w
	if g.ph == 0 && g.pw == 0 {
		if len(x)-start >= need {
			return x[start:]
		}
		copy(buf, x[start:start+g.cg()*g.h*g.w])
		return buf
	}
	for ci := range g.cg() {
		for y := range g.h {
			src := x[start+(ci*g.h+y)*g.w:][:g.w]
			copy(buf[ci*t.hp*t.wp+(y+g.ph)*t.wp+g.pw:], src)
		}
	}
	return buf
}

// zeroedBuf returns a recycled buffer of n zeros.
func zeroedBuf(n int) []float32 {
	b := getBuf(n)
	clear(b)
	return b
}

// conv2dForwardImplicit is conv2dForward as implicit GEMMs.
func conv2dForwardImplicit(g convGeom, minItems int, xd, wd []float32, b *Tensor, ep convEpilogue, out []float32, mask []byte, arg []int32) {
	ckk, p, og := g.ckk(), g.plane(), g.og()
	outLen, mlen := g.outLen(ep), kernels.ReluMaskLen(g.o*p)
	t := g.tapGeom()
	// The last tap's row ends where the planes do (stride 1), and the
	// product reads up to OffsetBSlack past it.
	need := g.cg()*t.hp*t.wp + kernels.OffsetBSlack
	parallelFor(g.n, minItems, func(_, lo, hi int) {
		// src is a padded (or, for the batch's last image, slack-extended)
		// image; raw, for narrow outputs, one group's product on the
		// wp-wide columns.
		grid := g.ow >= kernels.OffsetBGridMinSeg
		src := zeroedBuf(t.srcLen(g))
		var raw []float32
		if !grid {
			raw = getBuf(og * t.cols)
		}
		var ybuf []float32
		if ep == epReLUPool {
			ybuf = getBuf(g.o * p)
		}
		for i := lo; i < hi; i++ {
			yi := ybuf
			if ep != epReLUPool {
				yi = out[i*g.o*p : (i+1)*g.o*p]
			}
			for grp := range g.groups {
				x := t.source(g, xd, i, grp, need, src)
				if grid {
					// Output rows of at least a panel: the product skips
					// the dropped columns and writes the output itself.
					yg := yi[grp*og*p : (grp+1)*og*p]
					kernels.SgemmOffsetBGrid(og, p, ckk, wd[grp*og*ckk:], ckk, x, t.taps, g.ow, t.wp, 0, yg, p)
					if b != nil {
						for oc := range og {
							plane := yg[oc*p : (oc+1)*p]
							kernels.RowsBias(plane, p, plane, p, 1, p, b.data[grp*og+oc])
						}
					}
					continue
				}
				kernels.SgemmOffsetB(og, t.cols, ckk, wd[grp*og*ckk:], ckk, x, t.taps, 0, raw, t.cols)
				// The wanted columns, with the bias added as the im2col
				// path adds it (y + b, one rounding).
				for oc := range og {
					dst, rows := yi[(grp*og+oc)*p:][:p], raw[oc*t.cols:]
					if b == nil {
						kernels.CopyRows(false, dst, g.ow, rows, t.wp, g.oh, g.ow)
					} else {
						kernels.RowsBias(dst, g.ow, rows, t.wp, g.oh, g.ow, b.data[grp*og+oc])
					}
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
		for _, b := range [][]float32{raw, src, ybuf} {
			if b != nil {
				putBuf(b)
			}
		}
	})
}

// tapWeights returns each group's weights as [(i, j, c), og], the A of
// the input gradient's product: row (i, j, c) holds W[·, c, i, j]. The
// rows go tap by tap, so that a tile's rows fall on different channels'
// planes, which do not overlap.
func (g convGeom) tapWeights(wd []float32) []float32 {
	cg, og, kk := g.cg(), g.og(), g.kh*g.kw
	wt := getBuf(g.groups * kk * cg * og)
	for grp := range g.groups {
		dst := wt[grp*kk*cg*og:]
		for o := range og {
			for c := range cg {
				src := wd[((grp*og+o)*cg+c)*kk:][:kk]
				for t, v := range src {
					dst[(t*cg+c)*og+o] = v
				}
			}
		}
	}
	return wt
}

// colTaps is the offset table of the input gradient's rows (i, j, c) in
// the padded planes, in tapWeights' order.
func (g convGeom) colTaps(t tapGeom) kernels.RowOffsets {
	offs := make([]int, 0, g.ckk())
	for i := range g.kh {
		for j := range g.kw {
			for c := range g.cg() {
				offs = append(offs, c*t.hp*t.wp+i*g.dh*t.wp+j*g.dw)
			}
		}
	}
	return kernels.NewRowOffsets(offs)
}

// conv2dBackwardImplicit is conv2dBackward as implicit GEMMs. Every
// worker sums dWᵀ [ckk, O] and db privately; they are merged at the end.
func conv2dBackwardImplicit(g convGeom, minItems int, x, w, b *Tensor, xd, wd []float32, cast *bf16Cast, gradOf func(i int, buf []float32) []float32, bufLen int) {
	ckk, p, og, cg := g.ckk(), g.plane(), g.og(), g.cg()
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
	t := g.tapGeom()
	var wt []float32
	var ctaps kernels.RowOffsets
	if needX {
		wt = g.tapWeights(wd)
		defer putBuf(wt)
		ctaps = g.colTaps(t)
	}
	padded := g.ph > 0 || g.pw > 0
	workers := min(kernels.NumThreads(), g.n)
	partialW := make([][]float32, workers)
	partialB := make([][]float32, workers)
	used := parallelFor(g.n, minItems, func(worker, lo, hi int) {
		// G' for every output channel (the input gradient's): zero but
		// where an output pixel's gradient goes, so a buffer cleared once
		// serves every image.
		var gp, src, dxp, gbuf, rbuf []float32
		if needX {
			gp = zeroedBuf(g.o * t.cols)
		}
		if needW {
			src = zeroedBuf(t.srcLen(g))
		}
		if needX && padded {
			dxp = getBuf(cg * t.hp * t.wp)
		}
		if bufLen > 0 {
			gbuf = getBuf(bufLen)
		}
		if cast != nil {
			rbuf = getBuf(g.o * p)
		}
		var dw []float32
		if needW {
			dw = zeroedBuf(len(gw))
			partialW[worker] = dw
		}
		db := gb
		if worker > 0 && needB {
			db = make([]float32, len(gb))
			partialB[worker] = db
		}
		for i := lo; i < hi; i++ {
			gi := gradOf(i, gbuf)
			if needB {
				addBiasGrad(db, gi, p)
			}
			gi = cast.into(rbuf, gi)
			if needX {
				for oc := range g.o {
					kernels.CopyRows(false, gp[oc*t.cols:], t.wp, gi[oc*p:], g.ow, g.oh, g.ow)
				}
			}
			for grp := range g.groups {
				if needW {
					xs := t.source(g, xd, i, grp, 0, src)
					kernels.SgemmAddOffsetASegments(ckk, og, g.oh, g.ow, t.wp, xs, t.taps, gi[grp*og*p:], p, dw[grp*og:], g.o)
				}
				if !needX {
					continue
				}
				dxi, gg := g.group(gx, i, grp), gp[grp*og*t.cols:]
				wg := wt[grp*ckk*og:]
				if !padded {
					if freshX {
						clear(dxi)
					}
					kernels.SgemmAddOffsetC(ckk, t.cols, og, wg, og, gg, t.cols, dxi, ctaps)
					continue
				}
				clear(dxp)
				kernels.SgemmAddOffsetC(ckk, t.cols, og, wg, og, gg, t.cols, dxp, ctaps)
				for c := range cg {
					for y := range g.h {
						s := dxp[(c*t.hp+y+g.ph)*t.wp+g.pw:][:g.w]
						d := dxi[(c*g.h+y)*g.w:][:g.w]
						if freshX {
							copy(d, s)
						} else {
							addTo(d, s)
						}
					}
				}
			}
		}
		for _, b := range [][]float32{gp, src, dxp, gbuf, rbuf} {
			if b != nil {
				putBuf(b)
			}
		}
	})
	g.mergePartials(gw, gb, partialW, partialB, used, true)
}
