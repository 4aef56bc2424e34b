package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// Convolutions over small planes (ResNet's last stages: 8×8 and 4×4 at
// CIFAR size) run their implicit products on a few dozen columns per image,
// far from filling the 64-wide tiles of the GEMM kernels. For "same"
// convolutions (stride 1, odd square kernel, padding half of it) images are
// instead laid side by side with p = padding zero columns between them,
// several to a row: k images of W columns become one of k·(W+p), whose
// output columns b·(W+p) … b·(W+p)+W−1 are image b's, since every tap of
// those reads only image b or zeros. The unused columns cost p/(W+p) more
// multiply-adds; the longer rows let the products run on full tiles.
// Results differ from the per-image products in rounding only (the weight
// gradient sums over the pixels in another grouping).

// stackedConv switches the side-by-side path on where it applies; tests
// turn it off to compare.
var stackedConv = true

// stackedMaxWidth bounds the rows of the side-by-side path: as many
// images per row as keep it at most this wide, two of the GEMM kernels'
// 64-wide tiles.
const stackedMaxWidth = 128

// stackImages returns how many images of g to lay side by side (see
// above), or 1 to convolve them one by one: only for a float32 "same"
// convolution on the implicit path, rows under 16 pixels, and a batch that
// divides into rows with at least one per thread.
//
// Every epilogue takes the same path, so that a fused convolution and the
// separate ops still agree bit for bit.
func (g convGeom) stackImages() int {
	if !stackedConv || !implicitConv || !kernels.ImplicitConv() || AutocastPrecision() != FP32 {
		return 1
	}
	if g.groups != 1 || g.sh != 1 || g.sw != 1 || g.dh != 1 || g.dw != 1 ||
		g.kh != g.kw || g.kh%2 == 0 || g.kh == 1 || g.ph != g.kh/2 || g.pw != g.kw/2 || g.w >= 16 {
		return 1
	}
	maxK := stackedMaxWidth / (g.w + g.pw)
	if t := kernels.NumThreads(); t > 1 {
		maxK = min(maxK, g.n/t)
	}
	for k := min(maxK, g.n); k > 1; k-- {
		if g.n%k == 0 {
			return k
		}
	}
	return 1
}

// conv2dStacked is conv2d for geometry g and epilogue ep with k images
// laid side by side: x [N, C, H, W] becomes [N/k, C, H, k·(W+p)] (p zero
// columns after each image), is convolved (with the ReLU, if any), and
// image b's columns of each output row are taken back out into a result
// of its own storage, as any convolution's. The 2×2 pooling runs after
// that, as MaxPool2d: its windows would straddle images in the stacked
// rows; the pooling being exact, the values and gradients are still those
// of the separate ops.
func conv2dStacked(g convGeom, k int, x, w, b *Tensor, opt ConvOptions, ep convEpilogue) *Tensor {
	inner := ep
	if ep == epReLUPool {
		inner = epReLU
	}
	wide := stackCols(x, k, g.pw)
	y := conv2d(wide, w, b, opt, inner)
	out := unstackCols(y, k, g.w, g.pw)
	// Only the convolution reads the stacked input, and only unstackCols
	// its result: their storage goes back to the pool after Backward.
	wide.freeWithGraph()
	y.freeWithGraph()
	if ep != epReLUPool {
		return out
	}
	pooled := MaxPool2d(out, [2]int{2, 2}, [2]int{2, 2}, [2]int{})
	out.freeWithGraph()
	return pooled
}

// stackCols lays the images of x [N, C, H, W] side by side, k to a row,
// with p zero columns after each: the result is [N/k, C, H, k·(W+p)],
// image q·k+b's row at columns b·(W+p) … b·(W+p)+W−1 of row q.
func stackCols(x *Tensor, k, p int) *Tensor {
	n, c, h, w := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	wide := k * (w + p)
	out := &Tensor{data: getBuf(n / k * c * h * wide), shape: []int{n / k, c, h, wide}}
	// Every element is written (the gaps with zeros): a pooled buffer
	// needs no clearing.
	forStackedRows(n, c, h, k, w, wide, func(src, dst, b int) {
		d := out.data[dst+b*(w+p):]
		copy(d[:w], x.data[src:src+w])
		clear(d[w : w+p])
	})
	return record(out, "stack_cols", func(grad []float32) {
		gx := x.accGrad()
		forStackedRows(n, c, h, k, w, wide, func(src, dst, b int) {
			kernels.Add(gx[src:src+w], grad[dst+b*(w+p):dst+b*(w+p)+w])
		})
	}, x)
}

// unstackCols is the inverse of stackCols for y [N/k, O, H, k·(W+p)]: it
// takes each image's W columns back out into [N, O, H, W].
func unstackCols(y *Tensor, k, w, p int) *Tensor {
	q, o, h, wide := y.shape[0], y.shape[1], y.shape[2], y.shape[3]
	n := q * k
	out := &Tensor{data: getBuf(n * o * h * w), shape: []int{n, o, h, w}}
	forStackedRows(n, o, h, k, w, wide, func(dst, src, b int) {
		copy(out.data[dst:dst+w], y.data[src+b*(w+p):])
	})
	return record(out, "unstack_cols", func(grad []float32) {
		// The gap columns get no gradient: accGrad's buffer is zeroed.
		gy := y.accGrad()
		forStackedRows(n, o, h, k, w, wide, func(dst, src, b int) {
			kernels.Add(gy[src+b*(w+p):src+b*(w+p)+w], grad[dst:dst+w])
		})
	}, y)
}

// forStackedRows calls f for every row of every image plane of a batch of
// n images of c planes of h rows of w values, with the row's offset in the
// per-image layout, the offset of its row in the stacked layout (rows of
// wide values, k images to a row) and the image's place b in that row.
func forStackedRows(n, c, h, k, w, wide int, f func(img, stacked, b int)) {
	for i := range n {
		q, b := i/k, i%k
		for ch := range c {
			for y := range h {
				f(((i*c+ch)*h+y)*w, ((q*c+ch)*h+y)*wide, b)
			}
		}
	}
}
