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
	oh, ow         int // output
}

func (g convGeom) ckk() int    { return g.c * g.kh * g.kw }
func (g convGeom) plane() int  { return g.oh * g.ow }
func (g convGeom) inSize() int { return g.c * g.h * g.w }

// direct reports whether the im2col matrix of an image is the image itself
// (1×1 kernel, stride 1, no padding), so it need not be built.
func (g convGeom) direct() bool {
	return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0
}

// im2col returns image i's column matrix [ckk, plane], built in buf unless
// the image can be used as it is.
func (g convGeom) im2col(x []float32, i int, buf []float32) []float32 {
	img := x[i*g.inSize() : (i+1)*g.inSize()]
	if g.direct() {
		return img
	}
	kernels.Im2col(img, g.c, g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, buf)
	return buf
}

// convMinFlops is the per-goroutine work below which Conv2d stays on one
// goroutine.
const convMinFlops = 1 << 20

// Conv2d is PyTorch's 2-d convolution (cross-correlation): x is [N, C, H, W],
// w is [O, C, KH, KW], b is [O] or nil; the result is [N, O, OH, OW] with
// OH = (H + 2·padding[0] − KH)/stride[0] + 1 and likewise OW. Each image is
// unrolled with im2col and multiplied by the weight matrix [O, C·KH·KW];
// images are spread over goroutines when the batch is large enough.
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
	return conv2d(x, w, b, stride, padding, ep)
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

func conv2d(x, w, b *Tensor, stride, padding [2]int, ep convEpilogue) *Tensor {
	g := newConvGeom(convOpNames[ep], x, w, b, stride, padding, ep)
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
	conv2dForward(g, x, w, b, ep, out.data, mask, arg)
	if !track {
		putIdx(arg)
		return out
	}
	inputs := []*Tensor{x, w}
	if b != nil {
		inputs = append(inputs, b)
	}
	return record(out, convNodeNames[ep], func(grad []float32) {
		gradOf, bufLen := g.outputGrad(ep, grad, out.data, mask, arg)
		conv2dBackward(g, x, w, b, gradOf, bufLen)
		putIdx(arg)
		putBytes(mask)
		arg, mask = nil, nil
	}, inputs...)
}

// newConvGeom checks the operands of the op named op and returns its
// geometry; mistakes panic.
func newConvGeom(op string, x, w, b *Tensor, stride, padding [2]int, ep convEpilogue) convGeom {
	if x.Dim() != 4 || w.Dim() != 4 || x.shape[1] != w.shape[1] {
		panic(fmt.Sprintf("tensor: %s: input %v ([N, C, H, W]) does not match weight %v ([O, C, KH, KW])", op, x.shape, w.shape))
	}
	if b != nil && (b.Dim() != 1 || b.shape[0] != w.shape[0]) {
		panic(fmt.Sprintf("tensor: %s: bias %v does not match weight %v", op, b.shape, w.shape))
	}
	if stride[0] < 1 || stride[1] < 1 || padding[0] < 0 || padding[1] < 0 {
		panic(fmt.Sprintf("tensor: %s: invalid stride %v or padding %v", op, stride, padding))
	}
	g := convGeom{
		n: x.shape[0], c: x.shape[1], h: x.shape[2], w: x.shape[3],
		o: w.shape[0], kh: w.shape[2], kw: w.shape[3],
		sh: stride[0], sw: stride[1], ph: padding[0], pw: padding[1],
	}
	if g.h+2*g.ph < g.kh || g.w+2*g.pw < g.kw {
		panic(fmt.Sprintf("tensor: %s: kernel %dx%d larger than padded input %v (padding %v)", op, g.kh, g.kw, x.shape, padding))
	}
	g.oh = (g.h+2*g.ph-g.kh)/g.sh + 1
	g.ow = (g.w+2*g.pw-g.kw)/g.sw + 1
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

// conv2dForward computes the result into out, image by image: the
// product with the weights, the bias, then the epilogue. It fills the
// ReLU's mask if mask is not nil and the pooling's argmax arg.
func conv2dForward(g convGeom, x, w, b *Tensor, ep convEpilogue, out []float32, mask []byte, arg []int32) {
	ckk, p := g.ckk(), g.plane()
	outLen, mlen := g.outLen(ep), kernels.ReluMaskLen(g.o*p)
	var ones []float32
	if b != nil {
		ones = onesBuf(p)
		defer putBuf(ones)
	}
	perImage := 2 * g.o * ckk * p
	parallelFor(g.n, convMinFlops/max(perImage, 1)+1, func(_, lo, hi int) {
		// One image's columns at a time, in a buffer that stays in L2 for
		// the GEMM. Backward builds them again rather than keeping the
		// whole batch's: the batch's columns (42 MB for the CNN's second
		// conv) would go to memory and back, which measured slower than a
		// second im2col from the cached image.
		var scratch, ybuf []float32
		if !g.direct() {
			scratch = getBuf(ckk * p)
		}
		if ep == epReLUPool {
			ybuf = getBuf(g.o * p)
		}
		for i := lo; i < hi; i++ {
			yi := ybuf
			if ep != epReLUPool {
				yi = out[i*g.o*p : (i+1)*g.o*p]
			}
			kernels.Sgemm(false, false, g.o, p, ckk, 1, w.data, ckk, g.im2col(x.data, i, scratch), p, 0, yi, p)
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

// conv2dBackward accumulates Conv2d's input, weight and bias gradients.
// gradOf returns image i's output gradient, built in a buffer of bufLen
// elements if bufLen > 0.
func conv2dBackward(g convGeom, x, w, b *Tensor, gradOf func(i int, buf []float32) []float32, bufLen int) {
	ckk, p := g.ckk(), g.plane()
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
	transposed := g.o < ckk
	// Workers sum dW (or dWᵀ) and db privately, except that worker 0 adds
	// an untransposed dW and db straight into the gradients, and merge at
	// the end, so no two goroutines write one buffer.
	workers := min(kernels.NumThreads(), g.n)
	partialW := make([][]float32, workers)
	partialB := make([][]float32, workers)
	used := parallelFor(g.n, convMinFlops/max(perImage, 1)+1, func(worker, lo, hi int) {
		// One buffer holds image i's columns for dW, then its column
		// gradient for dX: half the L2 footprint of two.
		var scratch, gbuf []float32
		if (needW || needX) && !g.direct() {
			scratch = getBuf(ckk * p)
		}
		if bufLen > 0 {
			gbuf = getBuf(bufLen)
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
			if needW {
				g.addWeightGrad(dw, gi, g.im2col(x.data, i, scratch), transposed)
			}
			if needX {
				g.addInputGrad(gx[i*g.inSize():(i+1)*g.inSize()], w.data, gi, scratch, freshX)
			}
		}
		if scratch != nil {
			putBuf(scratch)
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

// addWeightGrad adds one image's weight gradient into dw: gi [O, p] times
// the image's columns col [ckk, p] transposed, into dW [O, ckk] or, when
// transposed, dWᵀ [ckk, O].
func (g convGeom) addWeightGrad(dw, gi, col []float32, transposed bool) {
	ckk, p := g.ckk(), g.plane()
	if transposed { // dWᵀ[ckk, O] += col_i[ckk, p] · g_iᵀ
		kernels.Sgemm(false, true, ckk, g.o, p, 1, col, p, gi, p, 1, dw, g.o)
	} else { // dW[O, ckk] += g_i[O, p] · col_iᵀ
		kernels.Sgemm(false, true, g.o, ckk, p, 1, gi, p, col, p, 1, dw, ckk)
	}
}

// addInputGrad adds one image's input gradient into dxi, clearing it first
// if fresh: the column gradient Wᵀ · gi, built in scratch [ckk, p] and
// folded back into the image unless the convolution is direct.
func (g convGeom) addInputGrad(dxi, w, gi, scratch []float32, fresh bool) {
	ckk, p := g.ckk(), g.plane()
	if g.direct() {
		beta := float32(1)
		if fresh {
			beta = 0
		}
		kernels.Sgemm(true, false, ckk, p, g.o, 1, w, ckk, gi, p, beta, dxi, p)
		return
	}
	if fresh {
		clear(dxi)
	}
	kernels.Sgemm(true, false, ckk, p, g.o, 1, w, ckk, gi, p, 0, scratch, p)
	kernels.Col2im(scratch, g.c, g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, dxi)
}

// mergePartials adds the private weight and bias gradients of the first
// used workers into gw and gb, in worker order, and recycles the weight
// buffers. A transposed partial holds dWᵀ [ckk, O].
func (g convGeom) mergePartials(gw, gb []float32, partialW, partialB [][]float32, used int, transposed bool) {
	ckk := g.ckk()
	for wk := 0; wk < used; wk++ {
		if dw := partialW[wk]; dw != nil {
			if transposed {
				for oc := 0; oc < g.o; oc++ {
					row := gw[oc*ckk : (oc+1)*ckk]
					for j := range row {
						row[j] += dw[j*g.o+oc]
					}
				}
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
