package tensor

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/kernels"
)

// Flatten returns a view of x with dimensions startDim.. merged into one,
// sharing x's data (like torch.flatten(x, start_dim)).
func Flatten(x *Tensor, startDim int) *Tensor {
	if startDim < 0 {
		startDim += len(x.shape)
	}
	if startDim < 0 || startDim > len(x.shape) {
		panic(fmt.Sprintf("tensor: Flatten: start dim %d out of range for shape %v", startDim, x.shape))
	}
	if startDim == len(x.shape) { // flattening nothing appends no dimension
		return x.Reshape(x.shape...)
	}
	shape := append(append([]int(nil), x.shape[:startDim]...), numel(x.shape[startDim:]))
	return x.Reshape(shape...)
}

// Transpose returns the transpose of a 2-d tensor as a new tensor.
func Transpose(x *Tensor) *Tensor {
	if x.Dim() != 2 {
		panic(fmt.Sprintf("tensor: Transpose needs a 2-d tensor, got %v", x.shape))
	}
	return Permute(x, 1, 0)
}

// Permute returns x with its dimensions reordered (out dim i is x's dim
// perm[i]), materialised in a new tensor.
func Permute(x *Tensor, perm ...int) *Tensor {
	if len(perm) != len(x.shape) {
		panic(fmt.Sprintf("tensor: Permute: %v is not a permutation of the dims of %v", perm, x.shape))
	}
	seen := make([]bool, len(perm))
	shape := make([]int, len(perm))
	xs := contiguousStrides(x.shape)
	src := make([]int, len(perm)) // x's stride for each out dim
	inv := make([]int, len(perm))
	for i, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			panic(fmt.Sprintf("tensor: Permute: %v is not a permutation of the dims of %v", perm, x.shape))
		}
		seen[p] = true
		shape[i] = x.shape[p]
		src[i] = xs[p]
		inv[p] = i
	}
	// Every element is written below.
	out := &Tensor{data: getBuf(len(x.data)), shape: shape}
	od, xd := out.data, x.data
	forEachRun(shape, src, contiguousStrides(shape), func(o, is, _, n, s1, _ int) {
		if s1 == 1 { // the last dimension stays last: whole rows
			copy(od[o:o+n], xd[is:is+n])
			return
		}
		for k := 0; k < n; k++ {
			od[o+k] = xd[is+k*s1]
		}
	})
	return record(out, "permute", func(g []float32) {
		gx := x.accGrad()
		forEachRun(shape, src, contiguousStrides(shape), func(o, is, _, n, s1, _ int) {
			if s1 == 1 {
				kernels.Add(gx[is:is+n], g[o:o+n])
				return
			}
			for k := 0; k < n; k++ {
				gx[is+k*s1] += g[o+k]
			}
		})
	}, x)
}

// Narrow returns elements start..start+length-1 of x along dim as a new
// tensor (like torch.narrow, but copied).
func Narrow(x *Tensor, dim, start, length int) *Tensor {
	d, outer, size, inner := splitDim("Narrow", x.shape, dim)
	if start < 0 || length < 0 || start+length > size {
		panic(fmt.Sprintf("tensor: Narrow: range [%d,%d) outside dim %d of shape %v", start, start+length, d, x.shape))
	}
	shape := append([]int(nil), x.shape...)
	shape[d] = length
	out := Zeros(shape...)
	run := length * inner
	for o := 0; o < outer; o++ {
		copy(out.data[o*run:(o+1)*run], x.data[(o*size+start)*inner:])
	}
	return record(out, "narrow", func(g []float32) {
		gx := x.accGrad()
		for o := 0; o < outer; o++ {
			addTo(gx[(o*size+start)*inner:(o*size+start)*inner+run], g[o*run:(o+1)*run])
		}
	}, x)
}

// Slice returns elements start..end-1 of x along dim (Narrow by bounds).
func Slice(x *Tensor, dim, start, end int) *Tensor {
	return Narrow(x, dim, start, end-start)
}

// Cat concatenates tensors along dim; all other dimensions must match.
func Cat(xs []*Tensor, dim int) *Tensor {
	if len(xs) == 0 {
		panic("tensor: Cat of no tensors")
	}
	first := xs[0]
	d, outer, _, inner := splitDim("Cat", first.shape, dim)
	total := 0
	for _, x := range xs {
		if len(x.shape) != len(first.shape) {
			panic(fmt.Sprintf("tensor: Cat: shapes %v and %v differ in rank", first.shape, x.shape))
		}
		for i := range x.shape {
			if i != d && x.shape[i] != first.shape[i] {
				panic(fmt.Sprintf("tensor: Cat along dim %d: shapes %v and %v differ", d, first.shape, x.shape))
			}
		}
		total += x.shape[d]
	}
	shape := append([]int(nil), first.shape...)
	shape[d] = total
	out := Zeros(shape...)
	orow := total * inner
	off := 0
	offs := make([]int, len(xs))
	for j, x := range xs {
		offs[j] = off
		run := x.shape[d] * inner
		for o := 0; o < outer; o++ {
			copy(out.data[o*orow+off:o*orow+off+run], x.data[o*run:(o+1)*run])
		}
		off += run
	}
	return record(out, "cat", func(g []float32) {
		for j, x := range xs {
			if !x.needsGrad() {
				continue
			}
			gx := x.accGrad()
			run := x.shape[d] * inner
			for o := 0; o < outer; o++ {
				addTo(gx[o*run:(o+1)*run], g[o*orow+offs[j]:o*orow+offs[j]+run])
			}
		}
	}, append([]*Tensor(nil), xs...)...)
}

// TransposeDims returns x with dimensions d0 and d1 swapped (negative
// values count from the end), like torch.transpose, materialised in a new
// tensor: tensors here are always contiguous.
func TransposeDims(x *Tensor, d0, d1 int) *Tensor {
	n := x.Dim()
	if d0 < 0 {
		d0 += n
	}
	if d1 < 0 {
		d1 += n
	}
	if d0 < 0 || d0 >= n || d1 < 0 || d1 >= n {
		panic(fmt.Sprintf("tensor: TransposeDims(%d, %d) out of range for shape %v", d0, d1, x.shape))
	}
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	perm[d0], perm[d1] = d1, d0
	return Permute(x, perm...)
}

// Unbind splits x along dim into x.Size(dim) tensors without that
// dimension, like torch.unbind. Along dimension 0 the pieces are views
// sharing x's data; along others they are copies.
func Unbind(x *Tensor, dim int) []*Tensor {
	d, outer, size, inner := splitDim("Unbind", x.shape, dim)
	shape := append(append([]int(nil), x.shape[:d]...), x.shape[d+1:]...)
	out := make([]*Tensor, size)
	for i := range size {
		if outer == 1 {
			lo, hi := i*inner, (i+1)*inner
			piece := &Tensor{data: x.data[lo:hi:hi], shape: append([]int(nil), shape...)}
			out[i] = record(piece, "unbind", func(g []float32) {
				addTo(x.accGrad()[lo:hi], g)
			}, x)
			continue
		}
		out[i] = Narrow(x, d, i, 1).Reshape(shape...)
	}
	return out
}

// MaskedFill returns x with value wherever mask is non-zero, like
// torch.masked_fill; mask broadcasts to x's shape and gets no gradient.
// The gradient passes to x only where mask is zero.
func MaskedFill(x, mask *Tensor, value float32) *Tensor {
	shape := broadcastShapes("MaskedFill", x.shape, mask.shape)
	if !sameShape(shape, x.shape) {
		panic(fmt.Sprintf("tensor: MaskedFill: mask %v does not broadcast to input %v", mask.shape, x.shape))
	}
	out := x.Clone()
	od, md := out.data, mask.data
	forEachRun(shape, contiguousStrides(shape), broadcastStrides(mask.shape, shape), func(o, _, im, n, _, sm int) {
		for j := range n {
			if md[im+j*sm] != 0 {
				od[o+j] = value
			}
		}
	})
	return record(out, "masked_fill", func(g []float32) {
		gx := x.accGrad()
		forEachRun(shape, contiguousStrides(shape), broadcastStrides(mask.shape, shape), func(o, _, im, n, _, sm int) {
			for j := range n {
				if md[im+j*sm] == 0 {
					gx[o+j] += g[o+j]
				}
			}
		})
	}, x)
}
