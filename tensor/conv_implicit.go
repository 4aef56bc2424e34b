package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// Implicit-GEMM convolution: the products read the image
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
//     without the column matrix; the dropped columns add zeros. A
//     stride-1 convolution of 128 channels or more runs it instead as the
//     transposed convolution of the output gradient, through the forward's
//     products (conv_inputgrad.go).
//
// A strided convolution first splits the image's padded planes into their
// stride×stride phases (see tapGeom): each tap then reads one phase plane
// at stride 1, and the above applies to the phase planes (wq wide) as it
// does to the padded ones; the input gradient is summed in phase planes
// and gathered back. No tap reads a pixel it does not use but in the
// dropped columns.
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
// are spread over goroutines with minItems each: not a direct convolution
// (a 1×1 kernel at stride 1 without padding needs no im2col anyway), a
// strided one only with output rows of at least stridedMinRow pixels, the
// CPU's kernels present, and either one thread or enough images to fill
// them all (the implicit products run on one goroutine each).
func (g convGeom) implicit(minItems int) bool {
	if !implicitConv || g.bf16 || !kernels.ImplicitConv() || g.direct() {
		return false
	}
	if (g.sh > 1 || g.sw > 1) && g.ow < stridedMinRow {
		return false
	}
	t := kernels.NumThreads()
	return t == 1 || g.n/max(minItems, 1) >= t
}

// stridedMinRow is the narrowest output row a strided convolution runs
// as an implicit GEMM with. Narrower rows (ResNet's downsampling to 8×8
// and 4×4 at CIFAR size) leave most of each image's 64-column tiles
// empty in the input gradient's product, where the im2col path's SGEMM
// puts the long dimension along the tiles instead; a stride-1
// convolution gets the same effect by stacking images (conv_stacked.go),
// which a strided one's phases do not allow.
const stridedMinRow = kernels.OffsetBGridMinSeg

// tapGeom is the layout of the implicit products of one convolution.
//
// With stride s, each padded plane is split into its s×s phases (rows ≡ a,
// columns ≡ b mod s), each hq×wq: tap (i, j) of output pixel (y, x) reads
// padded pixel (s·y + i·dh, s·x + j·dw), which is pixel (y + u0, x + v0)
// of phase ((i·dh) mod s, (j·dw) mod s) with u0 = ⌊i·dh/s⌋, v0 = ⌊j·dw/s⌋.
// A tap's row is then the phase plane from (u0, v0) on, as for stride 1
// (one phase, hq×wq the padded plane), and the products are the same.
type tapGeom struct {
	hp, wp int                // padded plane
	hq, wq int                // one phase of it: ⌈hp/sh⌉×⌈wp/sw⌉
	cols   int                // columns n' = (oh−1)·wq + ow of the implicit products
	taps   kernels.RowOffsets // row (c, i, j): phase plane of (c, i, j) + u0·wq + v0
}

func (g convGeom) tapGeom() tapGeom {
	t := tapGeom{hp: g.h + 2*g.ph, wp: g.w + 2*g.pw}
	t.hq, t.wq = (t.hp+g.sh-1)/g.sh, (t.wp+g.sw-1)/g.sw
	t.cols = (g.oh-1)*t.wq + g.ow
	offs := make([]int, 0, g.ckk())
	for ci := range g.cg() {
		for i := range g.kh {
			for j := range g.kw {
				offs = append(offs, t.tapOffset(g, ci, i, j))
			}
		}
	}
	t.taps = kernels.NewRowOffsets(offs)
	return t
}

// phases is the number of phase planes per channel.
func (g convGeom) phases() int { return g.sh * g.sw }

// tapOffset is where tap (i, j) of channel ci starts in the phase planes.
func (t tapGeom) tapOffset(g convGeom, ci, i, j int) int {
	pi, pj := i*g.dh, j*g.dw
	phase := (ci*g.sh+pi%g.sh)*g.sw + pj%g.sw
	return phase*t.hq*t.wq + pi/g.sh*t.wq + pj/g.sw
}

// planesLen is the length of one group's phase planes.
func (t tapGeom) planesLen(g convGeom) int { return g.cg() * g.phases() * t.hq * t.wq }

// srcLen is the length of a padded source buffer: the group's planes and
// the slack the forward product may read past them.
func (t tapGeom) srcLen(g convGeom) int { return t.planesLen(g) + kernels.OffsetBSlack }

// source returns image i's channel group grp as the taps read it, need
// elements from its start: x itself when it is neither padded nor strided
// and that many elements follow, else a copy in buf, whose padding must be
// zero (buf's padding is never written, so a buffer cleared once serves
// every image).
func (t tapGeom) source(g convGeom, x []float32, i, grp, need int, buf []float32) []float32 {
	start := i*g.inSize() + grp*g.cg()*g.h*g.w
	if g.sh > 1 || g.sw > 1 {
		cols := t.phaseCols(g)
		for ci := range g.cg() {
			for y := range g.h {
				row, d := x[start+(ci*g.h+y)*g.w:][:g.w], buf[t.phaseRow(g, ci, y):]
				for k, v := range row {
					d[cols[k]] = v
				}
			}
		}
		return buf
	}
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

// phaseRow is where input row y of channel ci (of its group) starts in the
// phase planes, before phaseCols' column offsets.
func (t tapGeom) phaseRow(g convGeom, ci, y int) int {
	yp := y + g.ph
	return ((ci*g.sh+yp%g.sh)*g.sw)*t.hq*t.wq + yp/g.sh*t.wq
}

// phaseCols returns, for each input column x, its offset from phaseRow in
// the phase planes: its phase's plane and its place in the phase's row.
func (t tapGeom) phaseCols(g convGeom) []int {
	cols := make([]int, g.w)
	for x := range cols {
		xp := x + g.pw
		cols[x] = xp%g.sw*t.hq*t.wq + xp/g.sw
	}
	return cols
}

// gatherPhases sets (fresh) or adds to the group's planes dxi [cg, h, w]
// their pixels in the phase planes dxp of a strided convolution.
func (t tapGeom) gatherPhases(g convGeom, dxi, dxp []float32, cols []int, fresh bool) {
	for c := range g.cg() {
		for y := range g.h {
			d, s := dxi[(c*g.h+y)*g.w:][:g.w], dxp[t.phaseRow(g, c, y):]
			if fresh {
				for k := range d {
					d[k] = s[cols[k]]
				}
				continue
			}
			for k := range d {
				d[k] += s[cols[k]]
			}
		}
	}
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
	// No tap's row ends past the planes, and the product reads up to
	// OffsetBSlack past a row.
	need := t.srcLen(g)
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
					kernels.SgemmOffsetBGrid(og, p, ckk, wd[grp*og*ckk:], ckk, x, t.taps, g.ow, t.wq, 0, yg, p)
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
						kernels.CopyRows(false, dst, g.ow, rows, t.wq, g.oh, g.ow)
					} else {
						kernels.RowsBias(dst, g.ow, rows, t.wq, g.oh, g.ow, b.data[grp*og+oc])
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
		tapMajor(wt[grp*kk*cg*og:], wd[grp*og*cg*kk:], og, cg, kk)
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
				offs = append(offs, t.tapOffset(g, c, i, j))
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
	// A wide stride-1 layer's input gradient runs as the transposed
	// convolution (see conv_inputgrad.go), others as column gradients.
	tg, asConv := g.inputGradConv()
	var tt tapGeom
	if needX && asConv {
		tt = tg.tapGeom()
		wt = g.flippedWeights(wd)
		defer putBuf(wt)
	} else if needX {
		wt = g.tapWeights(wd)
		defer putBuf(wt)
		ctaps = g.colTaps(t)
	}
	// A padded or strided input gradient is summed in the taps' planes,
	// then taken out of them.
	padded := g.ph > 0 || g.pw > 0 || g.sh > 1 || g.sw > 1
	var cols []int
	if g.sh > 1 || g.sw > 1 {
		cols = t.phaseCols(g)
	}
	workers := min(kernels.NumThreads(), g.n)
	partialW := make([][]float32, workers)
	partialB := make([][]float32, workers)
	used := parallelFor(g.n, minItems, func(worker, lo, hi int) {
		// G' for every output channel (the input gradient's): zero but
		// where an output pixel's gradient goes, so a buffer cleared once
		// serves every image.
		var gp, src, dxp, gbuf, rbuf []float32
		var ig *inputGradPass
		if needX && asConv {
			ig = newInputGradPass(g, tg, tt, wt)
			defer ig.release()
		} else if needX {
			gp = zeroedBuf(g.o * t.cols)
		}
		if needW {
			src = zeroedBuf(t.srcLen(g))
		}
		if needX && padded && !asConv {
			dxp = getBuf(t.planesLen(g))
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
			if needX && !asConv {
				for oc := range g.o {
					kernels.CopyRows(false, gp[oc*t.cols:], t.wq, gi[oc*p:], g.ow, g.oh, g.ow)
				}
			}
			for grp := range g.groups {
				if needW {
					xs := t.source(g, xd, i, grp, 0, src)
					kernels.SgemmAddOffsetASegments(ckk, og, g.oh, g.ow, t.wq, xs, t.taps, gi[grp*og*p:], p, dw[grp*og:], g.o)
				}
				if !needX {
					continue
				}
				if asConv {
					ig.run(gi, g.group(gx, i, grp), grp, freshX)
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
				if cols != nil {
					t.gatherPhases(g, dxi, dxp, cols, freshX)
					continue
				}
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
