package tensor

import "math"

// softmaxMinItems is the fewest elements per goroutine worth spreading a
// (log-)softmax over: each costs a float64 exp, so a few thousand repay a
// goroutine's start many times over.
const softmaxMinItems = 4096

// lanes runs fn over every slice along a dim: x viewed as
// [outer, size, inner], fn gets the strided lane's start and stride. The
// lanes are independent and each is one call, so spreading them over
// goroutines (contiguous runs of lanes, softmaxMinItems elements or more
// each) gives the one-thread result bit for bit.
func lanes(outer, size, inner int, fn func(base, stride int)) {
	parallelFor(outer*inner, softmaxMinItems/max(size, 1), func(_, lo, hi int) {
		for l := lo; l < hi; l++ {
			o, i := l/inner, l%inner
			fn(o*size*inner+i, inner)
		}
	})
}

// LogSoftmax returns log(softmax(x)) along dim, computed stably as
// x − max − log Σ exp(x − max).
func LogSoftmax(x *Tensor, dim int) *Tensor {
	_, outer, size, inner := splitDim("LogSoftmax", x.shape, dim)
	out := Zeros(x.shape...)
	xd, od := x.data, out.data
	lanes(outer, size, inner, func(b, s int) {
		m := float32(math.Inf(-1))
		for k := 0; k < size; k++ {
			m = max(m, xd[b+k*s])
		}
		var sum float64
		for k := 0; k < size; k++ {
			sum += math.Exp(float64(xd[b+k*s] - m))
		}
		lse := m + float32(math.Log(sum))
		for k := 0; k < size; k++ {
			od[b+k*s] = xd[b+k*s] - lse
		}
	})
	return record(out, "log_softmax", func(g []float32) {
		gx := x.accGrad()
		// dx = g − softmax·Σg
		lanes(outer, size, inner, func(b, s int) {
			var gs float32
			for k := 0; k < size; k++ {
				gs += g[b+k*s]
			}
			for k := 0; k < size; k++ {
				gx[b+k*s] += g[b+k*s] - float32(math.Exp(float64(od[b+k*s])))*gs
			}
		})
	}, x)
}

// Softmax returns exp(x)/Σexp(x) along dim, computed stably.
func Softmax(x *Tensor, dim int) *Tensor {
	_, outer, size, inner := splitDim("Softmax", x.shape, dim)
	out := Zeros(x.shape...)
	xd, od := x.data, out.data
	lanes(outer, size, inner, func(b, s int) {
		m := float32(math.Inf(-1))
		for k := 0; k < size; k++ {
			m = max(m, xd[b+k*s])
		}
		var sum float64
		for k := 0; k < size; k++ {
			e := math.Exp(float64(xd[b+k*s] - m))
			od[b+k*s] = float32(e)
			sum += e
		}
		inv := float32(1 / sum)
		for k := 0; k < size; k++ {
			od[b+k*s] *= inv
		}
	})
	return record(out, "softmax", func(g []float32) {
		gx := x.accGrad()
		// dx = y·(g − Σ g·y)
		lanes(outer, size, inner, func(b, s int) {
			var dot float32
			for k := 0; k < size; k++ {
				dot += g[b+k*s] * od[b+k*s]
			}
			for k := 0; k < size; k++ {
				gx[b+k*s] += od[b+k*s] * (g[b+k*s] - dot)
			}
		})
	}, x)
}
