package tensor

import (
	"fmt"
	"slices"
)

// normDims resolves negative dims, sorts them and checks range and
// uniqueness. No dims means all of them.
func normDims(op string, shape []int, dims []int) []int {
	if len(dims) == 0 {
		all := make([]int, len(shape))
		for i := range all {
			all[i] = i
		}
		return all
	}
	out := make([]int, len(dims))
	for i, d := range dims {
		if d < 0 {
			d += len(shape)
		}
		if d < 0 || d >= len(shape) {
			panic(fmt.Sprintf("tensor: %s: dim %d out of range for shape %v", op, dims[i], shape))
		}
		out[i] = d
	}
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			panic(fmt.Sprintf("tensor: %s: dim %d repeated in %v", op, out[i], dims))
		}
	}
	return out
}

// reducedShape returns shape with dims set to 1 (keep) or removed.
func reducedShape(shape, dims []int, keepdim bool) []int {
	out := make([]int, 0, len(shape))
	for i, d := range shape {
		if slices.Contains(dims, i) {
			if keepdim {
				out = append(out, 1)
			}
			continue
		}
		out = append(out, d)
	}
	return out
}

// Sum adds the elements of x over dims (all of them if none are given). The
// reduced dimensions are kept with size 1 if keepdim is set, else removed;
// summing over everything without keepdim gives a 0-d tensor.
func Sum(x *Tensor, keepdim bool, dims ...int) *Tensor {
	dims = normDims("Sum", x.shape, dims)
	kept := reducedShape(x.shape, dims, true)
	acc := make([]float64, numel(kept))
	xd := x.data
	forEachRun(x.shape, contiguousStrides(x.shape), broadcastStrides(kept, x.shape),
		func(o, _, io, n, _, so int) {
			if so == 0 {
				var s float64
				for _, v := range xd[o : o+n] {
					s += float64(v)
				}
				acc[io] += s
				return
			}
			for k, v := range xd[o : o+n] {
				acc[io+k] += float64(v)
			}
		})
	out := Zeros(reducedShape(x.shape, dims, keepdim)...)
	for i, v := range acc {
		out.data[i] = float32(v)
	}
	return record(out, "sum", func(g []float32) {
		gx := x.accGrad()
		forEachRun(x.shape, contiguousStrides(x.shape), broadcastStrides(kept, x.shape),
			func(o, _, io, n, _, so int) {
				dst := gx[o : o+n]
				if so == 0 {
					gv := g[io]
					for k := range dst {
						dst[k] += gv
					}
					return
				}
				addTo(dst, g[io:io+n])
			})
	}, x)
}

// Mean averages x over dims (all if none are given); see Sum for keepdim.
func Mean(x *Tensor, keepdim bool, dims ...int) *Tensor {
	nd := normDims("Mean", x.shape, dims)
	n := 1
	for _, d := range nd {
		n *= x.shape[d]
	}
	return MulScalar(Sum(x, keepdim, nd...), 1/float32(n))
}

// Var is the variance of x over dims (all if none are given): unbiased
// divides by n−1 (Bessel's correction, torch.var's default), else by n.
func Var(x *Tensor, unbiased, keepdim bool, dims ...int) *Tensor {
	nd := normDims("Var", x.shape, dims)
	n := 1
	for _, d := range nd {
		n *= x.shape[d]
	}
	d := Sub(x, Mean(x, true, nd...))
	div := float32(n)
	if unbiased {
		div = float32(n - 1)
	}
	return MulScalar(Sum(Mul(d, d), keepdim, nd...), 1/div)
}

// splitDim views shape as [outer, shape[dim], inner].
func splitDim(op string, shape []int, dim int) (d, outer, size, inner int) {
	if dim < 0 {
		dim += len(shape)
	}
	if dim < 0 || dim >= len(shape) {
		panic(fmt.Sprintf("tensor: %s: dim out of range for shape %v", op, shape))
	}
	outer, inner = 1, 1
	for _, v := range shape[:dim] {
		outer *= v
	}
	for _, v := range shape[dim+1:] {
		inner *= v
	}
	return dim, outer, shape[dim], inner
}

// argMaxDim returns for each (outer, inner) position the index along dim of
// the first largest element (NaN counts as largest, like PyTorch).
func argMaxDim(op string, x *Tensor, dim int) (idx []int, d, outer, size, inner int) {
	d, outer, size, inner = splitDim(op, x.shape, dim)
	if size == 0 {
		panic(fmt.Sprintf("tensor: %s: empty dim %d in shape %v", op, dim, x.shape))
	}
	idx = make([]int, outer*inner)
	for o := 0; o < outer; o++ {
		base := x.data[o*size*inner:]
		for i := 0; i < inner; i++ {
			best, bv := 0, base[i]
			for k := 1; k < size && bv == bv; k++ {
				v := base[k*inner+i]
				if v > bv || v != v {
					best, bv = k, v
				}
			}
			idx[o*inner+i] = best
		}
	}
	return idx, d, outer, size, inner
}

// Max returns the largest values of x along dim, keeping it with size 1 if
// keepdim is set. The gradient flows to the first largest element.
func Max(x *Tensor, dim int, keepdim bool) *Tensor {
	idx, d, _, size, inner := argMaxDim("Max", x, dim)
	out := Zeros(reducedShape(x.shape, []int{d}, keepdim)...)
	for j, k := range idx {
		o, i := j/inner, j%inner
		out.data[j] = x.data[(o*size+k)*inner+i]
	}
	return record(out, "max", func(g []float32) {
		gx := x.accGrad()
		for j, k := range idx {
			o, i := j/inner, j%inner
			gx[(o*size+k)*inner+i] += g[j]
		}
	}, x)
}

// ArgMax returns the index of the largest element along dim for every
// position of the other dimensions, in row-major order. It records no
// gradient (used for accuracy).
func ArgMax(x *Tensor, dim int) []int {
	idx, _, _, _, _ := argMaxDim("ArgMax", x, dim)
	return idx
}
