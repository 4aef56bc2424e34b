package kernels

// vecImpl is one set of element-wise kernels. Every function takes slices
// already checked to have equal lengths.
type vecImpl struct {
	name                       string
	add, mul, min, max         func(dst, src []float32)
	add64, mul64, min64, max64 func(dst, src []float64)
	axpy                       func(alpha float32, x, y []float32)
	scale                      func(alpha float32, x []float32)
	relu                       func(dst, src []float32)
	reluBackward               func(dx, dy, x []float32)
	sum                        func(x []float32) float32
	// reluMask and reluBackwardMask implement ReluMask and
	// ReluBackwardMask (lengths checked).
	reluMask         func(dst, src []float32, mask []byte)
	reluBackwardMask func(dx, dy []float32, mask []byte, add bool)
	// Three-operand kernels; the slices have equal lengths.
	reluBackwardSet, mulTo, addMulTo func(dst, x, y []float32)
	// copyRows and addRows, if set, copy (add) rows×cols floats between
	// strided rows in one call; see copyRows below.
	copyRows, addRows func(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)
	// col2imRows, if set, is Col2im's stride-1 loop over one kernel row
	// (see col2imRowsAVX512 in gen_asm.go).
	col2imRows func(dst *float32, dstStride int, src *float32, srcStride, planeStride, padW, kw, rows, chunks int, masks *uint16)
	// col2imRows8, if set, is col2imRows for the whole 8-column chunks of
	// each row only, with vector masks (see col2imRows8AVX2 in gen_asm.go).
	col2imRows8 func(dst *float32, dstStride int, src *float32, srcStride, planeStride, padW, kw, rows, chunks int, masks *int32)
	// maxPool2x2 and maxPool2x2Backward, if set, are MaxPool2x2's and
	// MaxPool2x2Backward's loops over one plane (arguments checked).
	maxPool2x2         func(src, dst *float32, arg *int32, w, oh, ow int)
	maxPool2x2Backward func(gx, grad *float32, arg *int32, w, oh, ow int)
	// maxPool2x2BackwardSet is maxPool2x2Backward storing instead of
	// adding: every element of the 2·oh rows' first 2·ow columns is set.
	maxPool2x2BackwardSet func(gx, grad *float32, arg *int32, w, oh, ow int)
}

// copyRows sets dst[r*dstStride+j] = src[r*srcStride+j] for r < rows,
// j < cols (or adds, if add).
func copyRows(add bool, dst []float32, dstStride int, src []float32, srcStride int, rows, cols int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	// Bounds-check the last row of each side; the assembly does no checks.
	_ = dst[(rows-1)*dstStride : (rows-1)*dstStride+cols]
	_ = src[(rows-1)*srcStride : (rows-1)*srcStride+cols]
	f := vec.copyRows
	if add {
		f = vec.addRows
	}
	if f != nil {
		f(&dst[0], dstStride, &src[0], srcStride, rows, cols)
		return
	}
	for r := 0; r < rows; r++ {
		d := dst[r*dstStride : r*dstStride+cols]
		s := src[r*srcStride : r*srcStride+cols]
		if add {
			vec.add(d, s)
		} else {
			copy(d, s)
		}
	}
}

// vec is the implementation the exported functions use, chosen at init.
var vec = defaultVec()

// Axpy computes y[i] += alpha·x[i]. len(y) must be at least len(x).
func Axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	if len(x) > 0 {
		vec.axpy(alpha, x, y)
	}
}

// Scale computes x[i] *= alpha.
func Scale(alpha float32, x []float32) {
	if len(x) > 0 {
		vec.scale(alpha, x)
	}
}

// Add computes dst[i] += src[i] (float32). len(dst) must be at least len(src).
func Add(dst, src []float32) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.add(dst, src)
	}
}

// Sum returns Σ x[i] in float32. The order of the additions is not
// specified (the vector kernels keep many partial sums, which also makes
// the rounding error grow more slowly than a sequential loop's).
func Sum(x []float32) float32 {
	if len(x) == 0 {
		return 0
	}
	return vec.sum(x)
}

// Mul computes dst[i] *= src[i].
func Mul(dst, src []float32) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.mul(dst, src)
	}
}

// Min computes dst[i] = min(dst[i], src[i]): src[i] if src[i] < dst[i],
// else dst[i] (so a NaN in dst stays, a NaN in src is ignored).
func Min(dst, src []float32) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.min(dst, src)
	}
}

// Max computes dst[i] = max(dst[i], src[i]) with Min's NaN rule.
func Max(dst, src []float32) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.max(dst, src)
	}
}

// Add64 computes dst[i] += src[i] (float64).
func Add64(dst, src []float64) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.add64(dst, src)
	}
}

// Mul64 computes dst[i] *= src[i] (float64).
func Mul64(dst, src []float64) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.mul64(dst, src)
	}
}

// Min64 computes dst[i] = min(dst[i], src[i]) (float64) with Min's NaN rule.
func Min64(dst, src []float64) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.min64(dst, src)
	}
}

// Max64 computes dst[i] = max(dst[i], src[i]) (float64) with Min's NaN rule.
func Max64(dst, src []float64) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.max64(dst, src)
	}
}

// Relu computes dst[i] = max(src[i], 0) (NaN and −0 give +0).
func Relu(dst, src []float32) {
	dst = dst[:len(src)]
	if len(src) > 0 {
		vec.relu(dst, src)
	}
}

// ReluBackward accumulates dx[i] += dy[i] where x[i] > 0.
func ReluBackward(dx, dy, x []float32) {
	dx = dx[:len(x)]
	dy = dy[:len(x)]
	if len(x) > 0 {
		vec.reluBackward(dx, dy, x)
	}
}

// ReluBackwardSet sets dx[i] = dy[i] where x[i] > 0 and +0 elsewhere:
// ReluBackward into a gradient buffer not yet holding anything, without
// clearing it first.
func ReluBackwardSet(dx, dy, x []float32) {
	dx = dx[:len(x)]
	dy = dy[:len(x)]
	if len(x) > 0 {
		vec.reluBackwardSet(dx, dy, x)
	}
}

// MulTo sets dst[i] = x[i]·y[i]. dst and x must be at least as long as y.
func MulTo(dst, x, y []float32) {
	dst = dst[:len(y)]
	x = x[:len(y)]
	if len(y) > 0 {
		vec.mulTo(dst, x, y)
	}
}

// AddMulTo computes dst[i] += x[i]·y[i], the product rounded before the
// addition (no fused multiply-add), like the obvious loop.
func AddMulTo(dst, x, y []float32) {
	dst = dst[:len(y)]
	x = x[:len(y)]
	if len(y) > 0 {
		vec.addMulTo(dst, x, y)
	}
}

// ReluMaskLen is the length of the mask ReluMask and ReluBackwardMask take
// for n elements: a bit per element, rounded up to whole 16-bit pieces.
func ReluMaskLen(n int) int { return (n + 15) / 16 * 2 }

// ReluMask is Relu that also records in mask, bit i%8 of byte i/8, whether
// src[i] > 0 (so ReLU's backward pass can read n/8 bytes instead of the
// n-float output). mask must hold ReluMaskLen(len(src)) bytes; the bits
// after the last element are zeroed or left as they were.
func ReluMask(dst, src []float32, mask []byte) {
	dst = dst[:len(src)]
	mask = mask[:ReluMaskLen(len(src))]
	if len(src) > 0 {
		vec.reluMask(dst, src, mask)
	}
}

// ReluBackwardMask is ReluBackward with ReluMask's mask: dx[i] += dy[i]
// where bit i is set; unless add, dx is overwritten instead (dy[i] where
// the bit is set, +0 elsewhere), for a gradient buffer not yet holding
// anything.
func ReluBackwardMask(dx, dy []float32, mask []byte, add bool) {
	dx = dx[:len(dy)]
	mask = mask[:ReluMaskLen(len(dy))]
	if len(dy) > 0 {
		vec.reluBackwardMask(dx, dy, mask, add)
	}
}

// AddBias adds bias[j] to every row of the rows×len(bias) matrix x.
func AddBias(x []float32, rows int, bias []float32) {
	n := len(bias)
	if n == 0 || rows <= 0 {
		return
	}
	_ = x[rows*n-1]
	for r := 0; r < rows; r++ {
		vec.add(x[r*n:(r+1)*n], bias)
	}
}

// SumRows accumulates dst[j] += Σ_r x[r*len(dst)+j] (the bias gradient).
func SumRows(dst, x []float32, rows int) {
	n := len(dst)
	if n == 0 || rows <= 0 {
		return
	}
	_ = x[rows*n-1]
	for r := 0; r < rows; r++ {
		vec.add(dst, x[r*n:(r+1)*n])
	}
}
