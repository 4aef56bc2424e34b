package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// The input gradient of a stride-1 convolution is itself a stride-1
// convolution: of the output gradient, padded by (k−1)·d − p on each side,
// with the weights flipped along both kernel axes and their channel axes
// swapped,
//
//	dX[c, y, x] = Σ_{o, i', j'} W[o, c, kh−1−i', kw−1−j'] · Gp[o, y + i'·dh, x + j'·dw].
//
// Run through the forward's implicit products (kernels.SgemmOffsetBGrid,
// or SgemmOffsetB for rows under 16 pixels), it is one product with k =
// og·kh·kw per channel group, whose tiles store each input-gradient
// element once, where the column-gradient form (SgemmAddOffsetC) runs
// k = og and adds every tile into the input gradient at each tap's
// offset: kh·kw read-modify-writes of the gradient per output channel
// block instead of one store. Results differ from that form in rounding
// only (each element is one FMA chain over (o, i', j') in k blocks).

// inputGradAsConv switches the input gradient of stride-1 convolutions
// onto the transposed convolution; the tests and benchmarks turn it off to
// compare with the column-gradient form.
var inputGradAsConv = true

// inputGradConvMinChannels is the fewest input channels per group whose
// input gradient runs as the transposed convolution: its product has
// that many rows, and each B panel it packs (og·kh·kw steps of the padded
// output gradient) serves that many rows' tiles. At ResNet's 64 channels
// on 32×32 planes (11 tiles per panel) it ran ~5% slower than the column
// gradients; at 128 channels on 16×16 ~20% faster, at 256 on 8×8 ~18%
// and at 512 on 4×4 ~50% (BenchmarkConvResNetLayers, CPU time, one
// thread). (A variable for the tests.)
var inputGradConvMinChannels = 128

// inputGradConv returns the geometry of the convolution that computes g's
// input gradient (input: the output gradient, output: the input
// gradient), and whether g's input gradient runs as one: stride 1,
// padding at most the dilated kernel's extent less one, and at least
// inputGradConvMinChannels input channels per group.
func (g convGeom) inputGradConv() (convGeom, bool) {
	if !inputGradAsConv || g.sh != 1 || g.sw != 1 || g.cg() < inputGradConvMinChannels {
		return g, false
	}
	qh, qw := (g.kh-1)*g.dh-g.ph, (g.kw-1)*g.dw-g.pw
	if qh < 0 || qw < 0 {
		return g, false
	}
	return convGeom{
		n: g.n, c: g.o, h: g.oh, w: g.ow,
		o: g.c, kh: g.kh, kw: g.kw,
		sh: 1, sw: 1, ph: qh, pw: qw,
		dh: g.dh, dw: g.dw, groups: g.groups,
		oh: g.h, ow: g.w,
	}, true
}

// flippedWeights returns the weights of g's transposed convolution t (see
// inputGradConv): per group [cg, (o, i', j')] with entry W[o, c, kh−1−i',
// kw−1−j'], the A of its products.
func (g convGeom) flippedWeights(wd []float32) []float32 {
	cg, og, kk := g.cg(), g.og(), g.kh*g.kw
	wf := getBuf(g.groups * cg * og * kk)
	// A copy of each weight's taps reversed: the (group, output channel)
	// rows go to the threads, the same result on any number.
	parallelFor(g.groups*og, max(1, (1<<16)/max(cg*kk, 1)), func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			grp, o := r/og, r%og
			src, dst := wd[grp*og*cg*kk:], wf[grp*cg*og*kk:]
			for c := range cg {
				s := src[(o*cg+c)*kk:][:kk]
				d := dst[(c*og+o)*kk:][:kk]
				for q := range kk {
					d[kk-1-q] = s[q]
				}
			}
		}
	})
	return wf
}

// inputGradPass is the state of one worker's transposed convolutions.
type inputGradPass struct {
	g, t  convGeom // the convolution and its transposed one
	tg    tapGeom  // t's taps
	wf    []float32
	src   []float32 // a padded output gradient, its padding zero
	raw   []float32 // one group's product on wide columns (rows under 16)
	grid  bool
	need  int
	plane int // g.h·g.w
}

// newInputGradPass returns a worker's state for t = g.inputGradConv()
// with the flipped weights wf; release returns its buffers.
func newInputGradPass(g, t convGeom, tg tapGeom, wf []float32) *inputGradPass {
	p := &inputGradPass{g: g, t: t, tg: tg, wf: wf, grid: g.w >= kernels.OffsetBGridMinSeg, need: tg.srcLen(t), plane: g.h * g.w}
	p.src = zeroedBuf(tg.srcLen(t))
	if !p.grid {
		p.raw = getBuf(g.cg() * tg.cols)
	}
	return p
}

func (p *inputGradPass) release() {
	putBuf(p.src)
	if p.raw != nil {
		putBuf(p.raw)
	}
}

// run sets (fresh) or adds to image i's group grp of the input gradient
// dxi [cg, h, w] from that image's output gradient gi [o, oh, ow].
func (p *inputGradPass) run(gi, dxi []float32, grp int, fresh bool) {
	g, t, tg := p.g, p.t, p.tg
	cg, k := g.cg(), t.ckk()
	x := tg.source(t, gi, 0, grp, p.need, p.src)
	a := p.wf[grp*cg*k:]
	if p.grid {
		beta := float32(1)
		if fresh {
			beta = 0
		}
		kernels.SgemmOffsetBGrid(cg, p.plane, k, a, k, x, tg.taps, g.w, tg.wq, beta, dxi, p.plane)
		return
	}
	kernels.SgemmOffsetB(cg, tg.cols, k, a, k, x, tg.taps, 0, p.raw, tg.cols)
	for c := range cg {
		kernels.CopyRows(!fresh, dxi[c*p.plane:], g.w, p.raw[c*tg.cols:], tg.wq, g.h, g.w)
	}
}
