package tensor

import "fmt"

// broadcastShapes returns the NumPy broadcast of shapes a and b: shapes are
// aligned at the right and each pair of dimensions must be equal or 1.
func broadcastShapes(op string, a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			panic(fmt.Sprintf("tensor: %s: shapes %v and %v do not broadcast", op, a, b))
		}
	}
	return out
}

// broadcastStrides returns, for each dimension of out, the element stride of
// a row-major tensor of shape in broadcast to out: 0 where in has size 1 or
// lacks the dimension.
func broadcastStrides(in, out []int) []int {
	st := make([]int, len(out))
	s := 1
	for i := len(out) - 1; i >= 0; i-- {
		j := len(in) - len(out) + i
		if j < 0 {
			continue
		}
		if in[j] != 1 {
			st[i] = s
		}
		s *= in[j]
	}
	return st
}

// forEachRun walks a row-major tensor of shape out one innermost row at a
// time. For each row it calls fn with the row's offset o in out, the
// matching offsets ia and ib in two broadcast operands with strides sa and
// sb, the row length n and the operands' innermost strides. Adjacent
// dimensions are merged where both operands allow, so runs are as long as
// possible.
func forEachRun(out, sa, sb []int, fn func(o, ia, ib, n, ia1, ib1 int)) {
	shape, sa, sb := mergeDims(out, sa, sb)
	nd := len(shape)
	if nd == 0 {
		fn(0, 0, 0, 1, 0, 0)
		return
	}
	for _, d := range shape {
		if d == 0 {
			return
		}
	}
	inner := shape[nd-1]
	ia1, ib1 := sa[nd-1], sb[nd-1]
	idx := make([]int, nd-1)
	o, ia, ib := 0, 0, 0
	for {
		fn(o, ia, ib, inner, ia1, ib1)
		o += inner
		// Advance the outer multi-index like an odometer.
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			ia += sa[d]
			ib += sb[d]
			if idx[d] < shape[d] {
				break
			}
			ia -= sa[d] * shape[d]
			ib -= sb[d] * shape[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// mergeDims drops size-1 dimensions and merges adjacent dimensions that are
// contiguous in out and in both operands.
func mergeDims(out, sa, sb []int) ([]int, []int, []int) {
	var shape, ra, rb []int
	for i, d := range out {
		if d == 1 {
			continue
		}
		if k := len(shape) - 1; k >= 0 &&
			ra[k] == sa[i]*d && rb[k] == sb[i]*d {
			shape[k] *= d
			ra[k], rb[k] = sa[i], sb[i]
			continue
		}
		shape = append(shape, d)
		ra = append(ra, sa[i])
		rb = append(rb, sb[i])
	}
	return shape, ra, rb
}

// reduceInto adds g (of shape out) into dst, a tensor of shape in that was
// broadcast to out: the gradient of a broadcast.
func reduceInto(dst []float32, in []int, g []float32, out []int) {
	if len(dst) == len(g) {
		addTo(dst, g)
		return
	}
	sd := broadcastStrides(in, out)
	ones := contiguousStrides(out)
	forEachRun(out, sd, ones, func(o, id, _ int, n, sd1, _ int) {
		if sd1 == 0 {
			var s float32
			for _, v := range g[o : o+n] {
				s += v
			}
			dst[id] += s
			return
		}
		addTo(dst[id:id+n], g[o:o+n])
	})
}

// contiguousStrides returns the row-major strides of shape.
func contiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}
