package tensor

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/kernels"
)

// convGeom is the geometry of one Conv2d call.
type convGeom struct {
	n, c, h, w     int // input
	o, kh, kw      int // weight
	sh, sw, ph, pw int // stride, padding
	dh, dw         int // dilation
	groups         int // channel groups: c/groups inputs feed o/groups outputs each
	oh, ow         int // output
	// sgemm runs the products: kernels.SgemmSerial when the images are
	// already spread over every thread (see withGemm), else kernels.Sgemm.
	sgemm gemmFunc
	// bf16 runs the products on the bf16 kernel (native bf16 autocast),
	// always through im2col: the implicit products are float32 kernels.
	bf16 bool
}

// withGemm returns g with the SGEMM for products inside a parallelFor over
// the images with minItems each: serial when that loop fills the threads
// (a second level of goroutines would only contend for the same cores),
// else split over them. Either gives the same bits.
func (g convGeom) withGemm(minItems int) convGeom {
	g.sgemm = kernels.Sgemm
	serial := false
	if t := kernels.NumThreads(); t > 1 && g.n/max(minItems, 1) >= t { // parallelFor's test
		g.sgemm, serial = kernels.SgemmSerial, true
	}
	if g.bf16 {
		g.sgemm = kernels.SgemmBF16
		if serial {
			g.sgemm = kernels.SgemmBF16Serial
		}
	}
	return g
}

// ckk is the length of a weight row: one group's input channels times the
// kernel, and the row count of a group's column matrix.
func (g convGeom) ckk() int    { return g.cg() * g.kh * g.kw }
func (g convGeom) cg() int     { return g.c / g.groups }
func (g convGeom) og() int     { return g.o / g.groups }
func (g convGeom) plane() int  { return g.oh * g.ow }
func (g convGeom) inSize() int { return g.c * g.h * g.w }

// direct reports whether the im2col matrix of an image is the image itself
// (1×1 kernel, stride 1, no padding), so it need not be built.
func (g convGeom) direct() bool {
	return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0
}

// blockRows is the number of output rows per block of the column matrix:
// the products go over blocks of output rows so that a block takes at most
// half of L2, leaving room for the image, the weights and the output.
// Whole-image columns that do not fit (648 KiB for the CNN's second conv,
// against a Zen 3 core's 512 KiB) would go to L3 and back twice per
// product: built, then read; or written, then folded back. Blocks are of
// even size; a direct convolution (its columns are the image) or columns
// that fit are one block.
func (g convGeom) blockRows() int {
	if g.direct() {
		return g.oh
	}
	maxRows := max(1, convL2Bytes()/8/max(g.ckk()*g.ow, 1))
	blocks := (g.oh + maxRows - 1) / maxRows
	return (g.oh + blocks - 1) / max(blocks, 1)
}

// convL2Bytes is the L2 size blockRows plans for (a variable for tests).
var convL2Bytes = kernels.L2CacheBytes

// shape is one channel group's geometry for the im2col kernels.
func (g convGeom) shape() kernels.ConvShape {
	return kernels.ConvShape{C: g.cg(), H: g.h, W: g.w, KH: g.kh, KW: g.kw,
		StrideH: g.sh, StrideW: g.sw, PadH: g.ph, PadW: g.pw, DilH: g.dh, DilW: g.dw}
}

// group returns image i's planes of channel group grp in x.
func (g convGeom) group(x []float32, i, grp int) []float32 {
	gs := g.cg() * g.h * g.w
	return x[i*g.inSize()+grp*gs : i*g.inSize()+(grp+1)*gs]
}

// im2col returns the column matrix [ckk, (r1−r0)·ow] of output rows
// r0..r1−1 of image i's channel group grp, built in buf unless the image
// can be used as it is (then the block is the whole image).
func (g convGeom) im2col(x []float32, i, grp, r0, r1 int, buf []float32) []float32 {
	img := g.group(x, i, grp)
	if g.direct() {
		return img
	}
	col := buf[:g.ckk()*(r1-r0)*g.ow]
	kernels.Im2colRows(img, g.shape(), r0, r1, col)
	return col
}

// ConvOptions are Conv2dWith's geometry options, PyTorch's conv2d
// arguments. A zero Stride or Dilation component, or zero Groups, means 1.
type ConvOptions struct {
	Stride, Padding [2]int // (vertical, horizontal)
	// Dilation spaces the kernel's taps: 2 reads every other pixel.
	Dilation [2]int
	// Groups splits the channels: input channels g·C/Groups.. feed output
	// channels g·O/Groups.. only; the weight is [O, C/Groups, KH, KW].
	Groups int
}

// orOne replaces zero components by 1.
func orOne(v [2]int) [2]int {
	for i := range v {
		if v[i] == 0 {
			v[i] = 1
		}
	}
	return v
}

// convMinFlops is the per-goroutine work below which Conv2d stays on one
// goroutine.
const convMinFlops = 1 << 20

// Conv2d is PyTorch's 2-d convolution (cross-correlation): x is [N, C, H, W],
// w is [O, C, KH, KW], b is [O] or nil; the result is [N, O, OH, OW] with
// OH = (H + 2·padding[0] − KH)/stride[0] + 1 and likewise OW. Each image is
// unrolled with im2col, a block of output rows at a time, and multiplied by
// the weight matrix [O, C·KH·KW]; images are spread over goroutines when
// the batch is large enough. On amd64 CPUs with AVX2 (in 6×64 tiles
// where they have AVX-512, 6×16 ones otherwise), float32 convolutions
// run as implicit GEMMs instead, reading the image in place, or for a
// stride above 1 its planes split into their stride×stride phases (the
// same results up to float rounding; see conv_implicit.go); under native
// bf16 autocast they keep the im2col path. Those of them with an
// odd square kernel, padding half of it, and output rows under 16 pixels
// (ResNet's last stages) lay several images side by side in each product
// (see conv_stacked.go); float32 ones of one group left on the im2col path with output
// planes of at most 64 pixels (ResNet's stride-2 ones to 8×8 and 4×4)
// multiply several images' column matrices side by side in one product
// (see conv_colstack.go). Float32 3×3 convolutions at stride 1 with padding
// 1, one group and at least 64 channels in and out (ResNet's) run through
// Winograd F(2×2, 3×3) instead, forward and backward: 16 multiply-adds per
// 2×2 output pixels, input and output channel instead of 36, the same
// results up to float rounding (see conv_winograd.go).
//
// post lists operations applied to the output in the same op (see
// PostOp): none, PostReLU, or PostReLU then PostMaxPool2x2. The result,
// and every gradient, is bit for bit that of the separate ops, for less
// memory traffic. Other lists panic.
func Conv2d(x, w, b *Tensor, stride, padding [2]int, post ...PostOp) *Tensor {
	ep, ok := epilogueOf(post)
	if !ok {
		panic(fmt.Sprintf("tensor: Conv2d: post-ops %v not supported (want none, [ReLU] or [ReLU MaxPool2x2])", post))
	}
	return conv2d(x, w, b, ConvOptions{Stride: stride, Padding: padding, Dilation: [2]int{1, 1}, Groups: 1}, ep)
}

// Conv2dWith is Conv2d with dilation and groups (see ConvOptions): x is
// [N, C, H, W], w is [O, C/Groups, KH, KW] and b is [O] or nil; the result
// is [N, O, OH, OW] with OH = (H + 2·padding − dilation·(KH−1) − 1)/stride
// + 1 and likewise OW. Each image's channel groups are unrolled with
// im2col and multiplied by their rows of the weight. Post-ops as for
// Conv2d.
func Conv2dWith(x, w, b *Tensor, o ConvOptions, post ...PostOp) *Tensor {
	ep, ok := epilogueOf(post)
	if !ok {
		panic(fmt.Sprintf("tensor: Conv2d: post-ops %v not supported (want none, [ReLU] or [ReLU MaxPool2x2])", post))
	}
	o.Stride, o.Dilation = orOne(o.Stride), orOne(o.Dilation)
	o.Groups = max(o.Groups, 1)
	return conv2d(x, w, b, o, ep)
}

// PostOp is an operation Conv2d applies to each image's output while it
// is still in cache, instead of a separate op over the whole batch.
type PostOp int

const (
	// PostReLU is ReLU. The convolution's output exists only as the
	// ReLU's: one activation buffer instead of two, and no separate
	// passes over memory for the ReLU forward and backward.
	PostReLU PostOp = iota + 1
	// PostMaxPool2x2 is MaxPool2d with a 2×2 window, stride 2 and no
	// padding, after PostReLU; the output must be at least 2×2. The
	// convolution and ReLU outputs of an image then live only in a
	// per-goroutine buffer that stays in cache; forward keeps the
	// pooling's argmax, and backward rebuilds each image's convolution
	// gradient from it and the result.
	PostMaxPool2x2
)

// String names the op.
func (p PostOp) String() string {
	switch p {
	case PostReLU:
		return "ReLU"
	case PostMaxPool2x2:
		return "MaxPool2x2"
	}
	return fmt.Sprintf("PostOp(%d)", int(p))
}

// convEpilogue is what a fused convolution applies to its output.
type convEpilogue int

const (
	epNone     convEpilogue = iota
	epReLU                  // ReLU
	epReLUPool              // ReLU, then 2×2 max pooling at stride 2
)

// epilogueOf maps a list of post-ops to the epilogue that runs them,
// reporting whether the list is supported.
func epilogueOf(post []PostOp) (convEpilogue, bool) {
	switch {
	case len(post) == 0:
		return epNone, true
	case len(post) == 1 && post[0] == PostReLU:
		return epReLU, true
	case len(post) == 2 && post[0] == PostReLU && post[1] == PostMaxPool2x2:
		return epReLUPool, true
	}
	return 0, false
}

// convOpNames name each epilogue's op in panics and in the graph.
var (
	convOpNames   = [...]string{"Conv2d", "Conv2d+ReLU", "Conv2d+ReLU+MaxPool2x2"}
	convNodeNames = [...]string{"conv2d", "conv2d_relu", "conv2d_relu_max_pool2d"}
)

func conv2d(x, w, b *Tensor, opt ConvOptions, ep convEpilogue) *Tensor {
	g := newConvGeom(convOpNames[ep], x, w, b, opt, ep)
	// Small planes: see conv_stacked.go; Winograd's products span images
	// without it (see conv_winograd.go).
	if k := g.stackImages(); k > 1 && !g.winograd() {
		return conv2dStacked(g, k, x, w, b, opt, ep)
	}
	p := g.plane()
	// Every element is written below (the GEMM with beta 0 does not read
	// its output): a recycled buffer needs no clearing.
	out := &Tensor{data: getBuf(g.n * g.outLen(ep)), shape: g.outShape(ep)}
	track := GradEnabled() && (x.requiresGrad || x.released || w.requiresGrad || w.released ||
		(b != nil && (b.requiresGrad || b.released)))
	// The ReLU's bit mask (unpooled only), per image a whole number of
	// 16-bit pieces; and the pooling's argmax.
	mlen := kernels.ReluMaskLen(g.o * p)
	var mask []byte
	var arg []int32
	if ep == epReLU && track {
		// Like the argmax, read once by backward and handed back.
		mask = getBytes(g.n * mlen)
	}
	if ep == epReLUPool {
		// Only this op's backward reads the argmax, once: it hands the
		// buffer back when done (or at once if nothing is recorded).
		arg = getIdx(len(out.data))
	}
	// Under bf16 autocast the products take rounded operands (see
	// Autocast); the cast keeps them for backward.
	cast := newBF16Cast()
	xd, wd := cast.of(x.data), cast.of(w.data)
	g.bf16 = cast != nil && cast.native
	conv2dForward(g, xd, wd, b, ep, out.data, mask, arg)
	if !track {
		putIdx(arg)
		cast.release()
		return out
	}
	inputs := []*Tensor{x, w}
	if b != nil {
		inputs = append(inputs, b)
	}
	return record(out, convNodeNames[ep], func(grad []float32) {
		gradOf, bufLen := g.outputGrad(ep, grad, out.data, mask, arg)
		if cast == nil { // the operands as they are now, as without autocast
			xd, wd = x.data, w.data
		}
		conv2dBackward(g, x, w, b, xd, wd, cast, gradOf, bufLen)
		cast.release()
		putIdx(arg)
		putBytes(mask)
		arg, mask = nil, nil
	}, inputs...)
}

// newConvGeom checks the operands of the op named op and returns its
// geometry; mistakes panic.
func newConvGeom(op string, x, w, b *Tensor, opt ConvOptions, ep convEpilogue) convGeom {
	stride, padding, dil, groups := opt.Stride, opt.Padding, opt.Dilation, opt.Groups
	if groups < 1 {
		panic(fmt.Sprintf("tensor: %s: groups %d must be positive", op, groups))
	}
	if x.Dim() != 4 || w.Dim() != 4 || x.shape[1] != w.shape[1]*groups {
		if groups == 1 {
			panic(fmt.Sprintf("tensor: %s: input %v ([N, C, H, W]) does not match weight %v ([O, C, KH, KW])", op, x.shape, w.shape))
		}
		panic(fmt.Sprintf("tensor: %s: input %v ([N, C, H, W]) does not match weight %v ([O, C/groups, KH, KW]) with %d groups", op, x.shape, w.shape, groups))
	}
	if w.shape[0]%groups != 0 {
		panic(fmt.Sprintf("tensor: %s: %d output channels not divisible by %d groups", op, w.shape[0], groups))
	}
	if b != nil && (b.Dim() != 1 || b.shape[0] != w.shape[0]) {
		panic(fmt.Sprintf("tensor: %s: bias %v does not match weight %v", op, b.shape, w.shape))
	}
	if stride[0] < 1 || stride[1] < 1 || padding[0] < 0 || padding[1] < 0 || dil[0] < 1 || dil[1] < 1 {
		panic(fmt.Sprintf("tensor: %s: invalid stride %v, padding %v or dilation %v", op, stride, padding, dil))
	}
	g := convGeom{
		n: x.shape[0], c: x.shape[1], h: x.shape[2], w: x.shape[3],
		o: w.shape[0], kh: w.shape[2], kw: w.shape[3],
		sh: stride[0], sw: stride[1], ph: padding[0], pw: padding[1],
		dh: dil[0], dw: dil[1], groups: groups,
	}
	// The dilated kernel's extent.
	if ekh, ekw := g.dh*(g.kh-1)+1, g.dw*(g.kw-1)+1; g.h+2*g.ph < ekh || g.w+2*g.pw < ekw {
		panic(fmt.Sprintf("tensor: %s: kernel %dx%d (dilation %v) larger than padded input %v (padding %v)", op, g.kh, g.kw, dil, x.shape, padding))
	}
	g.oh = kernels.ConvOut(g.h, g.kh, g.sh, g.ph, g.dh)
	g.ow = kernels.ConvOut(g.w, g.kw, g.sw, g.pw, g.dw)
	if ep == epReLUPool && (g.oh/2 == 0 || g.ow/2 == 0) {
		panic(fmt.Sprintf("tensor: %s: output %dx%d smaller than the 2x2 pooling window", op, g.oh, g.ow))
	}
	return g
}

// outLen is the number of result elements per image: the convolution's
// planes, or for the pooled op the pooled planes of oh/2×ow/2.
func (g convGeom) outLen(ep convEpilogue) int {
	if ep == epReLUPool {
		return g.o * (g.oh / 2) * (g.ow / 2)
	}
	return g.o * g.plane()
}

// outShape is the result's shape.
func (g convGeom) outShape(ep convEpilogue) []int {
	if ep == epReLUPool {
		return []int{g.n, g.o, g.oh / 2, g.ow / 2}
	}
	return []int{g.n, g.o, g.oh, g.ow}
}

// conv2dForward computes the result of input xd and weight wd into out,
// image by image: the product with the weights, the bias, then the
// epilogue. It fills the ReLU's mask if mask is not nil and the pooling's
// argmax arg.
func conv2dForward(g convGeom, xd, wd []float32, b *Tensor, ep convEpilogue, out []float32, mask []byte, arg []int32) {
	if g.winograd() { // see conv_winograd.go
		conv2dForwardWinograd(g, xd, wd, b, ep, out, mask, arg)
		return
	}
	ckk, p, og := g.ckk(), g.plane(), g.og()
	outLen, mlen := g.outLen(ep), kernels.ReluMaskLen(g.o*p)
	var ones []float32
	if b != nil {
		ones = onesBuf(p)
		defer putBuf(ones)
	}
	perImage := 2 * g.o * ckk * p
	minItems := convMinFlops/max(perImage, 1) + 1
	if ckk >= implicitForwardMinK && g.implicit(minItems) {
		conv2dForwardImplicit(g, minItems, xd, wd, b, ep, out, mask, arg)
		return
	}
	if k := g.colStack(); k > 1 { // small planes: see conv_colstack.go
		conv2dForwardColStack(g, k, xd, wd, b, ep, out, mask, arg)
		return
	}
	g = g.withGemm(minItems)
	parallelFor(g.n, minItems, func(_, lo, hi int) {
		// One block of an image's columns at a time (see blockRows), in a
		// buffer that stays in L2 for the GEMM. Backward builds them again
		// rather than keeping the whole batch's: the batch's columns (42
		// MB for the CNN's second conv) would go to memory and back, which
		// measured slower than a second im2col from the cached image.
		var scratch, ybuf []float32
		rb := g.blockRows()
		if !g.direct() {
			scratch = getBuf(ckk * rb * g.ow)
		}
		if ep == epReLUPool {
			ybuf = getBuf(g.o * p)
		}
		for i := lo; i < hi; i++ {
			yi := ybuf
			if ep != epReLUPool {
				yi = out[i*g.o*p : (i+1)*g.o*p]
			}
			// Splitting the columns into blocks leaves every output's sum,
			// and so the result, as it was.
			for grp := range g.groups {
				for r0 := 0; r0 < g.oh; r0 += rb {
					r1 := min(r0+rb, g.oh)
					n := (r1 - r0) * g.ow
					g.sgemm(false, false, og, n, ckk, 1, wd[grp*og*ckk:], ckk, g.im2col(xd, i, grp, r0, r1, scratch), n, 0, yi[grp*og*p+r0*g.ow:], p)
				}
			}
			if b != nil {
				// The bias is added after the product, while yi is still
				// in cache, with the vector Axpy against a row of ones
				// (bv·1 + y rounds like y + bv).
				for oc, bv := range b.data {
					kernels.Axpy(bv, ones[:p], yi[oc*p:(oc+1)*p])
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
		if scratch != nil {
			putBuf(scratch)
		}
		if ybuf != nil {
			putBuf(ybuf)
		}
	})
}

// outputGrad returns, for the backward pass of the op with epilogue ep
// whose result out received the gradient grad, the function giving image
// i's convolution output gradient (the incoming gradient itself, or
// rebuilt in buf through the pooling and the ReLU) and the length of buf
// it needs.
func (g convGeom) outputGrad(ep convEpilogue, grad, out []float32, mask []byte, arg []int32) (gradOf func(i int, buf []float32) []float32, bufLen int) {
	p := g.plane()
	switch ep {
	case epReLU:
		mlen := kernels.ReluMaskLen(g.o * p)
		return func(i int, buf []float32) []float32 {
			kernels.ReluBackwardMask(buf, grad[i*g.o*p:(i+1)*g.o*p], mask[i*mlen:(i+1)*mlen], false)
			return buf
		}, g.o * p
	case epReLUPool:
		// The pooled value is the ReLU output at the window's argmax,
		// positive exactly where the ReLU passes the gradient there; the
		// window's other elements get none. So the ReLU is applied to the
		// pooled gradient (a quarter of the size) before it is scattered
		// to the argmax.
		outLen := g.outLen(ep)
		return func(i int, buf []float32) []float32 {
			y, pg := buf[:g.o*p], buf[g.o*p:]
			kernels.ReluBackwardSet(pg, grad[i*outLen:(i+1)*outLen], out[i*outLen:(i+1)*outLen])
			kernels.MaxPool2x2Backward(y, pg, arg[i*outLen:(i+1)*outLen], g.o, g.oh, g.ow, false)
			return y
		}, g.o*p + outLen
	}
	return func(i int, _ []float32) []float32 { return grad[i*g.o*p : (i+1)*g.o*p] }, 0
}

// conv2dBackward accumulates Conv2d's input, weight and bias gradients,
// the products taking the forward's operands xd and wd. gradOf returns
// image i's output gradient, built in a buffer of bufLen elements if
// bufLen > 0; a non-nil cast rounds it for the products (not for the bias
// gradient, a sum).
func conv2dBackward(g convGeom, x, w, b *Tensor, xd, wd []float32, cast *bf16Cast, gradOf func(i int, buf []float32) []float32, bufLen int) {
	ckk, p := g.ckk(), g.plane()
	if cast == nil && g.winograd() { // see conv_winograd.go
		conv2dBackwardWinograd(g, x, w, b, xd, wd, gradOf, bufLen)
		return
	}
	if minItems := convMinFlops/max(4*g.o*ckk*p, 1) + 1; g.implicit(minItems) {
		conv2dBackwardImplicit(g, minItems, x, w, b, xd, wd, cast, gradOf, bufLen)
		return
	}
	if k := g.colStack(); k > 1 && cast == nil { // see conv_colstack.go
		conv2dBackwardColStack(g, k, x, w, b, xd, wd, gradOf, bufLen)
		return
	}
	needX, needW, needB := x.needsGrad(), w.needsGrad(), b.needsGrad()
	var gx, gw, gb []float32
	// A fresh input gradient buffer is cleared an image at a time, just
	// before that image's gradient is added into it, while it is in cache.
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
	perImage := 2 * g.o * ckk * p * 2
	// The weight gradient is a GEMM over p whose B operand must be packed
	// transposed. dW[O, ckk] = Σ g_i·col_iᵀ transposes col_i [ckk, p];
	// dWᵀ[ckk, O] = Σ col_i·g_iᵀ transposes g_i [O, p]: take the smaller
	// (dWᵀ for the CNN's 32→64 conv, dW for its 1→32 one).
	transposed := g.og() < ckk
	// Workers sum dW (or dWᵀ) and db privately, except that worker 0 adds
	// an untransposed dW and db straight into the gradients, and merge at
	// the end, so no two goroutines write one buffer.
	workers := min(kernels.NumThreads(), g.n)
	partialW := make([][]float32, workers)
	partialB := make([][]float32, workers)
	minItems := convMinFlops/max(perImage, 1) + 1
	g = g.withGemm(minItems)
	used := parallelFor(g.n, minItems, func(worker, lo, hi int) {
		// One buffer holds image i's columns for dW, then its column
		// gradient for dX: half the L2 footprint of two.
		var scratch, gbuf []float32
		rb := g.blockRows()
		if (needW || needX) && !g.direct() {
			scratch = getBuf(ckk * rb * g.ow)
		}
		if bufLen > 0 {
			gbuf = getBuf(bufLen)
		}
		var rbuf []float32 // the rounded output gradient under autocast
		if cast != nil {
			rbuf = getBuf(g.o * p)
		}
		dw := gw
		if needW && (transposed || worker > 0) {
			dw = getBuf(len(gw))
			clear(dw)
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
			for grp := range g.groups {
				var dxi []float32
				if needX {
					dxi = g.group(gx, i, grp)
					if freshX && !g.direct() {
						clear(dxi)
					}
				}
				// Per block of output rows: its columns for dW, then the
				// same buffer takes its column gradient for dX.
				for r0 := 0; r0 < g.oh; r0 += rb {
					r1 := min(r0+rb, g.oh)
					if needW {
						g.addWeightGrad(dw, gi, g.im2col(xd, i, grp, r0, r1, scratch), grp, r0, r1, transposed)
					}
					if needX {
						g.addInputGrad(dxi, wd, gi, scratch, grp, r0, r1, freshX)
					}
				}
			}
		}
		if scratch != nil {
			putBuf(scratch)
		}
		if rbuf != nil {
			putBuf(rbuf)
		}
		if gbuf != nil {
			putBuf(gbuf)
		}
	})
	g.mergePartials(gw, gb, partialW, partialB, used, transposed)
}

// addBiasGrad adds image gradient gi [O, p] summed over each channel's
// plane into db [O].
func addBiasGrad(db, gi []float32, p int) {
	for oc := range db {
		db[oc] += kernels.Sum(gi[oc*p : (oc+1)*p])
	}
}

// addWeightGrad adds the weight gradient of output rows r0..r1−1 of one
// image's channel group grp into dw: the group's rows of gi [O, p], those
// columns, times the block's columns col [ckk, n] transposed, into dW [O,
// ckk] or, when transposed, dWᵀ [ckk, O].
func (g convGeom) addWeightGrad(dw, gi, col []float32, grp, r0, r1 int, transposed bool) {
	ckk, p, og := g.ckk(), g.plane(), g.og()
	n, ld := (r1-r0)*g.ow, (r1-r0)*g.ow
	if g.direct() {
		ld = p // the image itself
	}
	gg := gi[grp*og*p+r0*g.ow:]
	if transposed { // dWᵀ[ckk, O] += col_i[ckk, n] · g_iᵀ
		g.sgemm(false, true, ckk, og, n, 1, col, ld, gg, p, 1, dw[grp*og:], g.o)
	} else { // dW[O, ckk] += g_i[O, n] · col_iᵀ
		g.sgemm(false, true, og, ckk, n, 1, gg, p, col, ld, 1, dw[grp*og*ckk:], ckk)
	}
}

// addInputGrad adds the input gradient of output rows r0..r1−1 of one
// image's channel group grp into that group's planes dxi: the column
// gradient Wᵀ · gi over the group's rows and the block's columns, built in
// scratch [ckk, n] and folded back into the image. A direct convolution's
// block is the whole image, written straight into dxi (overwriting it if
// fresh); otherwise the caller has cleared a fresh dxi.
func (g convGeom) addInputGrad(dxi, w, gi, scratch []float32, grp, r0, r1 int, fresh bool) {
	ckk, p, og := g.ckk(), g.plane(), g.og()
	wg, gg := w[grp*og*ckk:(grp+1)*og*ckk], gi[grp*og*p+r0*g.ow:]
	if g.direct() {
		beta := float32(1)
		if fresh {
			beta = 0
		}
		g.sgemm(true, false, ckk, p, og, 1, wg, ckk, gg, p, beta, dxi, p)
		return
	}
	n := (r1 - r0) * g.ow
	dcol := scratch[:ckk*n]
	g.sgemm(true, false, ckk, n, og, 1, wg, ckk, gg, p, 0, dcol, n)
	kernels.Col2imRows(dcol, g.shape(), r0, r1, dxi)
}

// mergePartials adds the private weight and bias gradients of the first
// used workers into gw and gb, in worker order, and recycles the weight
// buffers. A transposed partial holds dWᵀ [ckk, O].
func (g convGeom) mergePartials(gw, gb []float32, partialW, partialB [][]float32, used int, transposed bool) {
	ckk := g.ckk()
	for wk := 0; wk < used; wk++ {
		if dw := partialW[wk]; dw != nil {
			if transposed {
				addTransposed(gw, dw, g.o, ckk)
			} else {
				addTo(gw, dw)
			}
			putBuf(dw)
		}
		if partialB[wk] != nil {
			addTo(gb, partialB[wk])
		}
	}
}

// onesBuf returns a (recycled) buffer of n ones.
func onesBuf(n int) []float32 {
	b := getBuf(n)
	for i := range b {
		b[i] = 1
	}
	return b
}
