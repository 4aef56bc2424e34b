package tensor

import (
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
)

func addTo(dst, src []float32) { kernels.Add(dst, src) }

// elemMinItems is the number of elements per goroutine below which an
// elementwise op stays on one goroutine (a few tens of µs of work).
const elemMinItems = 1 << 16

// binaryPiece is how many elements binary copies and combines at a time
// (16 KiB of float32, well inside L1).
const binaryPiece = 4096

// binary evaluates f elementwise over the broadcast of a and b and returns
// the result and its shape. vec, if not nil, is the same operation as an
// in-place vector kernel (dst[i] = f(dst[i], src[i])), used on runs where
// both operands are contiguous, i.e. equal shapes or a broadcast row.
func binary(op string, a, b *Tensor, f func(x, y float32) float32, vec func(dst, src []float32)) (*Tensor, []int) {
	shape := broadcastShapes(op, a.shape, b.shape)
	// forEachRun visits every element: a recycled buffer (see
	// freeWithGraph) is overwritten whole.
	out := &Tensor{data: getBuf(numel(shape)), shape: shape}
	od, ad, bd := out.data, a.data, b.data
	if vec != nil && sameShape(a.shape, b.shape) { // one run, split over goroutines
		parallelFor(len(od), elemMinItems, func(_, lo, hi int) {
			// A piece at a time, so that vec reads the copy back from L1
			// rather than after a pass over the whole run.
			for p := lo; p < hi; p += binaryPiece {
				e := min(p+binaryPiece, hi)
				copy(od[p:e], ad[p:e])
				vec(od[p:e], bd[p:e])
			}
		})
		return out, shape
	}
	forEachRun(shape, broadcastStrides(a.shape, shape), broadcastStrides(b.shape, shape),
		func(o, ia, ib, n, sa, sb int) {
			if vec != nil && sa == 1 && sb == 1 {
				copy(od[o:o+n], ad[ia:ia+n])
				vec(od[o:o+n], bd[ib:ib+n])
				return
			}
			for k := 0; k < n; k++ {
				od[o+k] = f(ad[ia+k*sa], bd[ib+k*sb])
			}
		})
	return out, shape
}

// binaryGrad accumulates, for every output element, da(x, y, g) into a's
// gradient and db(x, y, g) into b's (summing over broadcast dimensions).
// A nil derivative or an operand that needs no gradient is skipped.
func binaryGrad(g []float32, shape []int, a, b *Tensor, da, db func(x, y, g float32) float32) {
	needA, needB := a.needsGrad() && da != nil, b.needsGrad() && db != nil
	var ga, gb []float32
	if needA {
		ga = a.accGrad()
	}
	if needB {
		gb = b.accGrad()
	}
	ad, bd := a.data, b.data
	forEachRun(shape, broadcastStrides(a.shape, shape), broadcastStrides(b.shape, shape),
		func(o, ia, ib, n, sa, sb int) {
			for k := 0; k < n; k++ {
				x, y, gv := ad[ia+k*sa], bd[ib+k*sb], g[o+k]
				if needA {
					ga[ia+k*sa] += da(x, y, gv)
				}
				if needB {
					gb[ib+k*sb] += db(x, y, gv)
				}
			}
		})
}

// Add returns a + b with broadcasting.
func Add(a, b *Tensor) *Tensor {
	out, shape := binary("Add", a, b, func(x, y float32) float32 { return x + y }, kernels.Add)
	return recordAdd(out, a, b, shape)
}

// recordAdd records out = a + b (broadcast to shape) with its backward
// pass.
func recordAdd(out, a, b *Tensor, shape []int) *Tensor {
	return record(out, "add", func(g []float32) {
		if out.passGrad != nil && len(g) > 0 && &out.passGrad[0] == &g[0] && a != b &&
			len(a.data) == len(g) && len(b.data) == len(g) {
			// A residual connection: both inputs' gradient is g itself.
			// One input takes out's pass-local buffer as its own (as
			// Reshape does) and the other a copy, instead of two cleared
			// buffers that g is added to.
			addGradNoReduce(out, g, b, a)
			return
		}
		if a.needsGrad() {
			reduceInto(a.accGrad(), a.shape, g, shape)
		}
		if b.needsGrad() {
			reduceInto(b.accGrad(), b.shape, g, shape)
		}
	}, a, b)
}

// addGradNoReduce passes g, the gradient of out and the pass-local
// buffer out owns, to each of ins that needs a gradient: the first one
// without a gradient of its own yet takes the buffer over, the others copy
// it (or add it to what they hold).
func addGradNoReduce(out *Tensor, g []float32, ins ...*Tensor) {
	var taker *Tensor
	for _, t := range ins {
		if t.needsGrad() && t.node != nil && t.passGrad == nil {
			taker = t
			break
		}
	}
	for _, t := range ins {
		if !t.needsGrad() || t == taker {
			continue
		}
		dst, fresh := t.gradDst()
		if fresh {
			copy(dst, g)
		} else {
			addTo(dst, g)
		}
	}
	if taker != nil {
		taker.passGrad, out.passGrad = g, nil
	}
}

// Sub returns a − b with broadcasting.
func Sub(a, b *Tensor) *Tensor {
	out, shape := binary("Sub", a, b, func(x, y float32) float32 { return x - y },
		func(dst, src []float32) { kernels.Axpy(-1, src, dst) })
	return record(out, "sub", func(g []float32) {
		if a.needsGrad() {
			reduceInto(a.accGrad(), a.shape, g, shape)
		}
		if b.needsGrad() {
			neg := make([]float32, len(g))
			kernels.Axpy(-1, g, neg)
			reduceInto(b.accGrad(), b.shape, neg, shape)
		}
	}, a, b)
}

// Mul returns a · b elementwise with broadcasting.
func Mul(a, b *Tensor) *Tensor {
	out, shape := binary("Mul", a, b, func(x, y float32) float32 { return x * y }, kernels.Mul)
	return record(out, "mul", func(g []float32) {
		binaryGrad(g, shape, a, b,
			func(_, y, g float32) float32 { return g * y },
			func(x, _, g float32) float32 { return g * x })
	}, a, b)
}

// Div returns a / b elementwise with broadcasting.
func Div(a, b *Tensor) *Tensor {
	out, shape := binary("Div", a, b, func(x, y float32) float32 { return x / y }, nil)
	return record(out, "div", func(g []float32) {
		binaryGrad(g, shape, a, b,
			func(_, y, g float32) float32 { return g / y },
			func(x, y, g float32) float32 { return -g * x / (y * y) })
	}, a, b)
}

// unary applies f elementwise; df returns the input gradient from the input
// x, the output y and the output gradient g. Large tensors are spread over
// goroutines in contiguous pieces; every element is computed alone, so the
// result is the one-thread result bit for bit.
func unary(op string, x *Tensor, f func(float32) float32, df func(x, y, g float32) float32) *Tensor {
	out := Zeros(x.shape...)
	parallelFor(len(x.data), elemMinItems/8, func(_, lo, hi int) {
		for i, v := range x.data[lo:hi] {
			out.data[lo+i] = f(v)
		}
	})
	return record(out, op, func(g []float32) {
		gx := x.accGrad()
		parallelFor(len(g), elemMinItems/8, func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				gx[i] += df(x.data[i], out.data[i], g[i])
			}
		})
	}, x)
}

// AddScalar returns x + s.
func AddScalar(x *Tensor, s float32) *Tensor {
	out := x.Clone()
	for i := range out.data {
		out.data[i] += s
	}
	return record(out, "add_scalar", func(g []float32) { addTo(x.accGrad(), g) }, x)
}

// MulScalar returns x · s.
func MulScalar(x *Tensor, s float32) *Tensor {
	out := x.Clone()
	kernels.Scale(s, out.data)
	return record(out, "mul_scalar", func(g []float32) { kernels.Axpy(s, g, x.accGrad()) }, x)
}

// Neg returns −x.
func Neg(x *Tensor) *Tensor { return MulScalar(x, -1) }

// Exp returns eˣ elementwise.
func Exp(x *Tensor) *Tensor {
	return unary("exp", x, func(v float32) float32 { return float32(math.Exp(float64(v))) },
		func(_, y, g float32) float32 { return g * y })
}

// Log returns the natural logarithm elementwise.
func Log(x *Tensor) *Tensor {
	return unary("log", x, func(v float32) float32 { return float32(math.Log(float64(v))) },
		func(x, _, g float32) float32 { return g / x })
}

// Sqrt returns √x elementwise.
func Sqrt(x *Tensor) *Tensor {
	return unary("sqrt", x, func(v float32) float32 { return float32(math.Sqrt(float64(v))) },
		func(_, y, g float32) float32 { return g / (2 * y) })
}

// PowScalar returns xᵖ elementwise.
func PowScalar(x *Tensor, p float32) *Tensor {
	pp := float64(p)
	return unary("pow", x, func(v float32) float32 { return float32(math.Pow(float64(v), pp)) },
		func(x, _, g float32) float32 {
			if p == 0 {
				return 0
			}
			return g * p * float32(math.Pow(float64(x), pp-1))
		})
}

// Tanh returns tanh(x) elementwise.
func Tanh(x *Tensor) *Tensor {
	return unary("tanh", x, func(v float32) float32 { return float32(math.Tanh(float64(v))) },
		func(_, y, g float32) float32 { return g * (1 - y*y) })
}

// Sigmoid returns 1/(1+e⁻ˣ) elementwise, computed without overflow.
func Sigmoid(x *Tensor) *Tensor {
	return unary("sigmoid", x, sigmoid, func(_, y, g float32) float32 { return g * y * (1 - y) })
}

func sigmoid(v float32) float32 {
	if v >= 0 {
		return float32(1 / (1 + math.Exp(-float64(v))))
	}
	e := math.Exp(float64(v))
	return float32(e / (1 + e))
}

// ReLU returns max(x, 0) elementwise. When autograd records it, the
// backward pass needs only whether each x > 0: a bit mask of n/8 bytes
// instead of reading the n-float output again.
func ReLU(x *Tensor) *Tensor {
	// Every element is written below.
	out := &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	n := len(x.data)
	if !GradEnabled() || !(x.requiresGrad || x.released) {
		parallelFor(n, elemMinItems, func(_, lo, hi int) {
			kernels.Relu(out.data[lo:hi], x.data[lo:hi])
		})
		return out
	}
	// Only backward reads the mask, once: it hands it back for reuse.
	mask := getBytes(kernels.ReluMaskLen(n))
	// Workers take whole 64-element blocks, so that no two write one
	// 16-bit piece of the mask.
	blocks := (n + 63) / 64
	parallelFor(blocks, elemMinItems/64, func(_, lo, hi int) {
		a, b := lo*64, min(hi*64, n)
		kernels.ReluMask(out.data[a:b], x.data[a:b], mask[a/8:])
	})
	return record(out, "relu", func(g []float32) {
		gx, fresh := x.gradDst()
		parallelFor(blocks, elemMinItems/64, func(_, lo, hi int) {
			a, b := lo*64, min(hi*64, n)
			kernels.ReluBackwardMask(gx[a:b], g[a:b], mask[a/8:], !fresh)
		})
		putBytes(mask)
		mask = nil
	}, x)
}

// GELUTanh returns GELU's tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), PyTorch's
// approximate='tanh' (GPT-2's "gelu_new").
func GELUTanh(x *Tensor) *Tensor {
	const c = 0.7978845608028654 // √(2/π)
	return unaryParallel("gelu_tanh", x,
		func(v float32) float32 {
			f := float64(v)
			return float32(0.5 * f * (1 + math.Tanh(c*(f+0.044715*f*f*f))))
		},
		func(x, g float32) float32 {
			f := float64(x)
			u := c * (f + 0.044715*f*f*f)
			t := math.Tanh(u)
			du := c * (1 + 3*0.044715*f*f)
			return g * float32(0.5*(1+t)+0.5*f*(1-t*t)*du)
		})
}

// unaryParallel is unary for ops whose gradient depends on the input only,
// spread over goroutines for large tensors.
func unaryParallel(op string, x *Tensor, f func(float32) float32, df func(x, g float32) float32) *Tensor {
	out := &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	parallelFor(len(x.data), elemMinItems/8, func(_, lo, hi int) {
		for i, v := range x.data[lo:hi] {
			out.data[lo+i] = f(v)
		}
	})
	return record(out, op, func(g []float32) {
		gx, fresh := x.gradDst()
		parallelFor(len(g), elemMinItems/8, func(_, lo, hi int) {
			if fresh {
				for i := lo; i < hi; i++ {
					gx[i] = df(x.data[i], g[i])
				}
				return
			}
			for i := lo; i < hi; i++ {
				gx[i] += df(x.data[i], g[i])
			}
		})
	}, x)
}

// Clamp limits every element to [lo, hi]. The gradient passes where
// lo ≤ x ≤ hi, like PyTorch's.
func Clamp(x *Tensor, lo, hi float32) *Tensor {
	return unary("clamp", x,
		func(v float32) float32 { return min(max(v, lo), hi) },
		func(x, _, g float32) float32 {
			if x >= lo && x <= hi {
				return g
			}
			return 0
		})
}
