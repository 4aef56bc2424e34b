package tensor

// Winograd F(2×2, 3×3): a 3×3 convolution at stride 1 computes each 2×2
// block of output pixels from the 4×4 block of input pixels under it as
//
//	Y = Aᵀ [ Σ_c (G W[o, c] Gᵀ) ⊙ (Bᵀ D[c] B) ] A
//
// with 16 multiply-adds per output channel, input channel and block
// instead of the direct form's 36. Over a batch, the 16 positions ξ of the
// transformed 4×4 blocks are 16 independent products
//
//	M[ξ] (O × T) = U[ξ] (O × C) · V[ξ] (C × T),
//
// U the transformed weights, V the transformed input blocks (T blocks,
// across images), run on the SGEMM; the transforms (additions and halvings
// only, kernels.WinogradInputRow and the others) are O(C·T) and O(O·T)
// against the products' O(O·C·T). The input gradient is such a
// convolution itself, of the output gradient with the flipped weights; the
// weight gradient is Gᵀ [ Σ_t (A dY_t Aᵀ) ⊙ (Bᵀ D_t B) ] G, the same
// products with T as their inner dimension. The results differ from the
// direct sums in rounding only: the transforms add a few roundings per
// element, which for F(2×2, 3×3) stay within a few units of float32
// precision of the sums of magnitudes (the reason the larger F(4×4, 3×3),
// whose transforms carry factors up to 8, is not used).

import "github.com/gotrain/gotrain/internal/kernels"

// winogradConv switches the Winograd path on where it applies; the tests
// and benchmarks turn it off to compare.
var winogradConv = true

// winogradMinChannels is the fewest input and output channels a
// convolution runs through Winograd with: with fewer, the products are
// too short to run at the SGEMM's speed, and the transforms' passes over
// memory outweigh the saved multiply-adds. (A variable for the tests.)
var winogradMinChannels = 64

// winograd reports whether g runs through Winograd F(2×2, 3×3): a float32
// 3×3 convolution at stride 1, padding 1 and dilation 1, one group, and
// at least winogradMinChannels channels in and out.
func (g convGeom) winograd() bool {
	return winogradConv && !g.bf16 && g.groups == 1 && g.kh == 3 && g.kw == 3 &&
		g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.ph == 1 && g.pw == 1 &&
		g.c >= winogradMinChannels && g.o >= winogradMinChannels
}

// wgTransformWeights returns the transformed weights U [16, O, C] of
// w [O, C, 3, 3]: U[ξ=(i,j)][o][c] = (G w[o,c] Gᵀ)[i][j] with
// G = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1].
func wgTransformWeights(w []float32, o, c int) []float32 {
	u := getBuf(16 * o * c)
	oc := o * c
	// Blocks of pairs (o, c), each transformed into a small local array
	// and then copied out: the 16 rows of U are far apart, and writing
	// them one value at a time would touch 16 pages per pair. Every pair
	// is transformed alone, so the blocks go to the threads (this runs
	// between the layers' parallel passes, where one thread would leave
	// the others idle) with the same result on any number.
	const blk = 64
	blocks := (oc + blk - 1) / blk
	parallelFor(blocks, wgMinPairBlocks, func(_, lo, hi int) {
		wgTransformPairs(u, w, oc, lo*blk, min(hi*blk, oc))
	})
	return u
}

// wgMinPairBlocks is the fewest blocks of 64 weight pairs per goroutine
// in the weight transforms: a few microseconds of work each.
const wgMinPairBlocks = 16

// wgTransformPairs writes U of pairs k0…k1−1 of w into u (see
// wgTransformWeights), 64 pairs at a time.
func wgTransformPairs(u, w []float32, oc, k0, k1 int) {
	const blk = 64
	var loc [16][blk]float32
	for ; k0 < k1; k0 += blk {
		n := min(blk, k1-k0)
		for q := range n {
			g := w[9*(k0+q) : 9*(k0+q)+9 : 9*(k0+q)+9]
			var t [4][3]float32 // G·g
			for j := range 3 {
				g0, g1, g2 := g[j], g[3+j], g[6+j]
				t[0][j] = g0
				t[1][j] = 0.5 * (g0 + g1 + g2)
				t[2][j] = 0.5 * (g0 - g1 + g2)
				t[3][j] = g2
			}
			for i := range 4 {
				t0, t1, t2 := t[i][0], t[i][1], t[i][2]
				loc[4*i][q] = t0
				loc[4*i+1][q] = 0.5 * (t0 + t1 + t2)
				loc[4*i+2][q] = 0.5 * (t0 - t1 + t2)
				loc[4*i+3][q] = t2
			}
		}
		for xi := range 16 {
			copy(u[xi*oc+k0:xi*oc+k0+n], loc[xi][:n])
		}
	}
}

// wgAddWeightGrad adds Gᵀ·dU·G, with Gᵀ = [1 ½ ½ 0; 0 ½ −½ 0; 0 ½ ½ 1],
// of each pair (o, c) of du [16, O, C] (position ξ at ξ·oc) into gw [O, C,
// 3, 3]. The pairs go to the threads; each is transformed alone, so the
// result does not depend on their number.
func wgAddWeightGrad(gw, du []float32, oc, o, c int) {
	parallelFor(o*c, 64*wgMinPairBlocks, func(_, lo, hi int) {
		wgAddWeightGradPairs(gw, du, oc, lo, hi)
	})
}

// wgAddWeightGradPairs is wgAddWeightGrad for pairs lo…hi−1.
func wgAddWeightGradPairs(gw, du []float32, oc, lo, hi int) {
	for k := lo; k < hi; k++ {
		var r [3][4]float32 // Gᵀ·dU
		for j := range 4 {
			u0, u1, u2, u3 := du[j*oc+k], du[(4+j)*oc+k], du[(8+j)*oc+k], du[(12+j)*oc+k]
			r[0][j] = u0 + 0.5*(u1+u2)
			r[1][j] = 0.5 * (u1 - u2)
			r[2][j] = 0.5*(u1+u2) + u3
		}
		d := gw[9*k : 9*k+9 : 9*k+9]
		for a := range 3 {
			e := r[a]
			d[3*a] += e[0] + 0.5*(e[1]+e[2])
			d[3*a+1] += 0.5 * (e[1] - e[2])
			d[3*a+2] += 0.5*(e[1]+e[2]) + e[3]
		}
	}
}

// wgGeom is the geometry of one Winograd convolution: cin planes of h×w
// in, cout planes of h×w out (3×3, stride 1, padding 1), in th×tw blocks
// of 2×2 output pixels. A set of 16 products (a chunk) covers chunk whole
// images, or where an image has more blocks than a chunk should, strips
// of rows block rows of one image.
type wgGeom struct {
	cin, cout, h, w int
	th, tw          int // blocks per column and row: ⌈h/2⌉, ⌈w/2⌉
	chunk, rows     int
}

// wgTargetBytes bounds a chunk's transformed operands and products so
// that they stay in the outer caches between the passes; wgMinBlocks is
// the fewest blocks per chunk, unless the batch has fewer: the products'
// columns, a few 64-wide tiles of the SGEMM's kernels, so that a partial
// last tile costs little. (Variables for the tests.)
var (
	wgTargetBytes = 2 << 20
	wgMinBlocks   = 256
)

func newWgGeom(cin, cout, h, w int) wgGeom {
	wg := wgGeom{cin: cin, cout: cout, h: h, w: w, th: (h + 1) / 2, tw: (w + 1) / 2}
	target := max(wgMinBlocks, wgTargetBytes/(64*(cin+cout)))
	wg.chunk, wg.rows = max(1, target/wg.blocks()), wg.th
	if wg.blocks() > target {
		wg.chunk, wg.rows = 1, max(1, target/wg.tw)
	}
	return wg
}

// forChunks calls f for each chunk of images lo…hi−1: images i0…i1−1,
// block rows ty0…ty1−1 of each.
func (wg wgGeom) forChunks(lo, hi int, f func(i0, i1, ty0, ty1 int)) {
	for i0 := lo; i0 < hi; i0 += wg.chunk {
		i1 := min(i0+wg.chunk, hi)
		for ty0 := 0; ty0 < wg.th; ty0 += wg.rows {
			f(i0, i1, ty0, min(ty0+wg.rows, wg.th))
		}
	}
}

// blocks is the number of blocks per image.
func (wg wgGeom) blocks() int { return wg.th * wg.tw }

// wgStride is the distance between the rows of the 16 positions ξ of an
// operand of n elements each: one cache line more than n, as rows a
// multiple of 4 KiB apart would fall in one set of the L1 cache, which the
// transforms, reading or writing all 16 at once, would thrash.
func wgStride(n int) int { return n + 16 }

// maxT is the most blocks in a chunk.
func (wg wgGeom) maxT() int { return wg.chunk * wg.rows * wg.tw }

// padLen is the length of a padded input plane, (2·th+2)×(2·tw+2), with
// the transforms' slack.
func (wg wgGeom) padLen() int { return (2*wg.th+2)*(2*wg.tw+2) + kernels.WinogradSlack }

// transformIn writes the transformed blocks Bᵀ·D·B of block rows
// ty0…ty1−1 of plane x into v [16, cin, t] at channel c, blocks t0…,
// through pad (padLen, its border zero).
func (wg wgGeom) transformIn(v, pad, x []float32, c, t, t0, ty0, ty1 int) {
	wp := 2*wg.tw + 2
	// The plane's rows under the blocks, each at its place inside a zero
	// border of one pixel (and one more row and column where h or w is
	// odd); the border is never written.
	for y := max(0, 2*ty0-1); y < min(wg.h, 2*ty1+1); y++ {
		copy(pad[(y+1)*wp+1:(y+1)*wp+1+wg.w], x[y*wg.w:(y+1)*wg.w])
	}
	ct := wgStride(wg.cin * t)
	for ty := ty0; ty < ty1; ty++ {
		kernels.WinogradInputRow(v[c*t+t0+(ty-ty0)*wg.tw:], ct, pad[2*ty*wp:], wp, wg.tw)
	}
}

// transformGrad writes the transformed blocks A·dY·Aᵀ of block rows
// ty0…ty1−1 of output-gradient plane gy into gh [16, cout, t] at channel o,
// blocks t0…, through pad (2·th×2·tw, its cells past the plane zero).
func (wg wgGeom) transformGrad(gh, pad, gy []float32, o, t, t0, ty0, ty1 int) {
	wp := 2 * wg.tw
	for y := 2 * ty0; y < min(wg.h, 2*ty1); y++ {
		copy(pad[y*wp:y*wp+wg.w], gy[y*wg.w:(y+1)*wg.w])
	}
	ot := wgStride(wg.cout * t)
	for ty := ty0; ty < ty1; ty++ {
		kernels.WinogradGradRow(gh[o*t+t0+(ty-ty0)*wg.tw:], ot, pad[2*ty*wp:], wp, wg.tw)
	}
}

// transformOut sets (or adds to) block rows ty0…ty1−1 of plane y: the
// output blocks Aᵀ·M·A of output channel o, blocks t0… of m [16, cout, t].
func (wg wgGeom) transformOut(m, y []float32, o, t, t0, ty0, ty1 int, add bool) {
	ot := wgStride(wg.cout * t)
	for ty := ty0; ty < ty1; ty++ {
		rows := min(2, wg.h-2*ty)
		kernels.WinogradOutputRow(y[2*ty*wg.w:], wg.w, rows, wg.w, m[o*t+t0+(ty-ty0)*wg.tw:], ot, add)
	}
}

// products sets m[ξ] (cout × t) = u[ξ] (cout × cin) · v[ξ] (cin × t) for
// the 16 positions ξ.
func (wg wgGeom) products(sgemm gemmFunc, u, v, m []float32, t int) {
	oc, ct, ot := wg.cout*wg.cin, wgStride(wg.cin*t), wgStride(wg.cout*t)
	for xi := range 16 {
		sgemm(false, false, wg.cout, t, wg.cin, 1, u[xi*oc:], wg.cin, v[xi*ct:], t, 0, m[xi*ot:], t)
	}
}

// wgMinItems is the images per goroutine below which the Winograd passes
// stay on one goroutine (as convMinFlops for the direct form's work).
func (g convGeom) wgMinItems() int {
	return convMinFlops/max(2*g.o*g.c*9*g.plane(), 1) + 1
}

// conv2dForwardWinograd is conv2dForward through Winograd F(2×2, 3×3).
func conv2dForwardWinograd(g convGeom, xd, wd []float32, b *Tensor, ep convEpilogue, out []float32, mask []byte, arg []int32) {
	p := g.plane()
	outLen, mlen := g.outLen(ep), kernels.ReluMaskLen(g.o*p)
	u := wgTransformWeights(wd, g.o, g.c)
	defer putBuf(u)
	wg := newWgGeom(g.c, g.o, g.h, g.w)
	minItems := g.wgMinItems()
	sgemm := g.withGemm(minItems).sgemm
	parallelFor(g.n, minItems, func(_, lo, hi int) {
		pad := zeroedBuf(wg.padLen())
		v := getBuf(16 * wgStride(g.c*wg.maxT()))
		m := getBuf(16*wgStride(g.o*wg.maxT()) + kernels.WinogradSlack)
		bufs := [][]float32{pad, v, m}
		// The pooled op's unpooled output, an image at a time.
		var ybuf []float32
		if ep == epReLUPool {
			ybuf = getBuf(g.o * p)
			bufs = append(bufs, ybuf)
		}
		defer putBufs(bufs)
		wg.forChunks(lo, hi, func(i0, i1, ty0, ty1 int) {
			nb := (ty1 - ty0) * wg.tw
			t := (i1 - i0) * nb
			// Channel by channel, the chunk's images in turn: their blocks
			// are side by side in each row of v and m, so that small
			// planes (a few blocks each) fill whole cache lines in turn.
			for c := range g.c {
				for i := i0; i < i1; i++ {
					wg.transformIn(v, pad, xd[i*g.inSize()+c*p:][:p], c, t, (i-i0)*nb, ty0, ty1)
				}
			}
			wg.products(sgemm, u, v, m, t)
			if ep != epReLUPool {
				for o := range g.o {
					for i := i0; i < i1; i++ {
						wg.transformOut(m, out[(i*g.o+o)*p:][:p], o, t, (i-i0)*nb, ty0, ty1, false)
					}
				}
			}
			for i := i0; i < i1; i++ {
				yi := ybuf
				if ep != epReLUPool {
					yi = out[i*g.o*p : (i+1)*g.o*p]
				} else {
					for o := range g.o {
						wg.transformOut(m, yi[o*p:(o+1)*p], o, t, (i-i0)*nb, ty0, ty1, false)
					}
				}
				if ty1 < wg.th { // the epilogue once the image is whole
					continue
				}
				if b != nil {
					for o := range g.o {
						// As the im2col path adds it: y + b, one rounding.
						plane := yi[o*p : (o+1)*p]
						kernels.RowsBias(plane, p, plane, p, 1, p, b.data[o])
					}
				}
				switch {
				case ep == epNone:
				case mask != nil:
					kernels.ReluMask(yi, yi, mask[i*mlen:(i+1)*mlen])
				default:
					kernels.Relu(yi, yi)
				}
				if ep == epReLUPool {
					kernels.MaxPool2x2(yi, out[i*outLen:(i+1)*outLen], arg[i*outLen:(i+1)*outLen], g.o, g.oh, g.ow)
				}
			}
		})
	})
}

// conv2dBackwardWinograd is conv2dBackward through Winograd F(2×2, 3×3)
// for g.winograd() convolutions, in one pass over the images: each
// chunk's output gradients are transformed for the input gradient (the
// convolution with the flipped weights) and for the weight gradient,
// beside the chunk's inputs. Workers sum dU and db privately; they are
// merged at the end.
func conv2dBackwardWinograd(g convGeom, x, w, b *Tensor, xd, wd []float32, gradOf func(i int, buf []float32) []float32, bufLen int) {
	p := g.plane()
	needX, needW, needB := x.needsGrad(), w.needsGrad(), b.needsGrad()
	var gx, gb []float32
	fresh := false
	var ux []float32
	if needX {
		gx, fresh = x.gradDst()
		wf := g.flippedWeights(wd) // [C, O, 3, 3]
		ux = wgTransformWeights(wf, g.c, g.o)
		putBuf(wf)
		defer putBuf(ux)
	}
	if needB {
		gb = b.accGrad()
	}
	wgx := newWgGeom(g.o, g.c, g.h, g.w) // the input gradient's convolution
	wgw := newWgGeom(g.c, g.o, g.h, g.w) // the forward's, for dW
	// Both have the same blocks and channels in all, so the same chunks.
	maxT := wgx.maxT()
	minItems := g.wgMinItems()
	sgemm := g.withGemm(minItems).sgemm
	workers := min(kernels.NumThreads(), g.n)
	partialU := make([][]float32, workers)
	partialB := make([][]float32, workers)
	used := parallelFor(g.n, minItems, func(worker, lo, hi int) {
		var bufs [][]float32
		buf := func(n int) []float32 {
			b := getBuf(n)
			bufs = append(bufs, b)
			return b
		}
		defer func() { putBufs(bufs) }()
		var gbuf, padG, vx, mx, padX, vw, gh []float32
		if bufLen > 0 {
			gbuf = buf(bufLen)
		}
		if needX {
			padG = buf(wgx.padLen())
			clear(padG)
			vx = buf(16 * wgStride(g.o*maxT))
			mx = buf(16*wgStride(g.c*maxT) + kernels.WinogradSlack)
		}
		var du []float32
		if needW {
			padX = buf(wgw.padLen())
			clear(padX)
			vw = buf(16 * wgStride(g.c*maxT))
			gh = buf(16*wgStride(g.o*maxT) + kernels.WinogradSlack)
			du = zeroedBuf(16 * wgStride(g.o*g.c))
			partialU[worker] = du
		}
		db := gb
		if worker > 0 && needB {
			db = make([]float32, len(gb))
			partialB[worker] = db
		}
		// The gradient transform's plane, 2·th×2·tw: cells past an odd
		// plane's last row or column stay zero.
		var padY []float32
		if needW {
			padY = buf(4*wgw.blocks() + kernels.WinogradSlack)
			clear(padY)
		}
		// Image i's output gradient, built once (a chunk of strips is one
		// image's, and reuses it), its bias gradient added then.
		lastI := -1
		var gi []float32
		gradAt := func(i int) []float32 {
			if i != lastI {
				gi, lastI = gradOf(i, gbuf), i
				if needB {
					addBiasGrad(db, gi, p)
				}
			}
			return gi
		}
		wgx.forChunks(lo, hi, func(i0, i1, ty0, ty1 int) {
			nb := (ty1 - ty0) * wgx.tw
			t := (i1 - i0) * nb
			transformGrads := func(gi []float32, o, i int) {
				plane := gi[o*p : (o+1)*p]
				if needX {
					wgx.transformIn(vx, padG, plane, o, t, (i-i0)*nb, ty0, ty1)
				}
				if needW {
					wgw.transformGrad(gh, padY, plane, o, t, (i-i0)*nb, ty0, ty1)
				}
			}
			if bufLen == 0 {
				// Every image's gradient is at hand: channel by channel,
				// the chunk's images in turn, as in the forward pass.
				for i := i0; i < i1; i++ {
					gradAt(i) // the bias gradient, in image order
				}
				for o := range g.o {
					for i := i0; i < i1; i++ {
						transformGrads(gradOf(i, nil), o, i)
					}
				}
			} else {
				for i := i0; i < i1; i++ {
					gi := gradAt(i)
					for o := range g.o {
						transformGrads(gi, o, i)
					}
				}
			}
			if needW {
				for c := range g.c {
					for i := i0; i < i1; i++ {
						wgw.transformIn(vw, padX, xd[i*g.inSize()+c*p:][:p], c, t, (i-i0)*nb, ty0, ty1)
					}
				}
			}
			if needX {
				wgx.products(sgemm, ux, vx, mx, t)
				for c := range g.c {
					for i := i0; i < i1; i++ {
						wgx.transformOut(mx, gx[i*g.inSize()+c*p:][:p], c, t, (i-i0)*nb, ty0, ty1, !fresh)
					}
				}
			}
			if needW {
				// dU[ξ] (O × C) += (A dY Aᵀ)[ξ] (O × t) · V[ξ]ᵀ (t × C).
				oc, ot, ct := wgStride(g.o*g.c), wgStride(g.o*t), wgStride(g.c*t)
				for xi := range 16 {
					sgemm(false, true, g.o, g.c, t, 1, gh[xi*ot:], t, vw[xi*ct:], t, 1, du[xi*oc:], g.c)
				}
			}
		})
	})
	if needW {
		// The workers' sums in worker order, then one transform; each
		// element is summed alone, so ranges of them go to the threads.
		du := partialU[0]
		if used > 1 {
			parallelFor(len(du), 1<<14, func(_, lo, hi int) {
				for wk := 1; wk < used; wk++ {
					addTo(du[lo:hi], partialU[wk][lo:hi])
				}
			})
		}
		for wk := 1; wk < used; wk++ {
			putBuf(partialU[wk])
		}
		wgAddWeightGrad(w.accGrad(), du, wgStride(g.o*g.c), g.o, g.c)
		putBuf(du)
	}
	for wk := 1; wk < used; wk++ {
		if partialB[wk] != nil {
			addTo(gb, partialB[wk])
		}
	}
}
