package kernels

// genericVec is the portable implementation of the element-wise kernels;
// each loop is also the reference the assembly versions are tested against.
var genericVec = &vecImpl{
	name: "generic",
	add:  addGeneric[float32], mul: mulGeneric[float32], min: minGeneric[float32], max: maxGeneric[float32],
	add64: addGeneric[float64], mul64: mulGeneric[float64], min64: minGeneric[float64], max64: maxGeneric[float64],
	axpy: axpyGeneric, scale: scaleGeneric, relu: reluGeneric, reluBackward: reluBackwardGeneric,
	sum: sumGeneric,

	reluBackwardSet: reluBackwardSetGeneric, mulTo: mulToGeneric, addMulTo: addMulToGeneric,
	reluMask: reluMaskGeneric, reluBackwardMask: reluBackwardMaskGeneric,
}

// sumGeneric keeps four partial sums: a sequential float32 sum is both
// slow (one dependent add per element) and less accurate.
func sumGeneric(x []float32) float32 {
	var s0, s1, s2, s3 float32
	for len(x) >= 4 {
		s0 += x[0]
		s1 += x[1]
		s2 += x[2]
		s3 += x[3]
		x = x[4:]
	}
	for _, v := range x {
		s0 += v
	}
	return (s0 + s1) + (s2 + s3)
}

func addGeneric[T float32 | float64](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] += v
	}
}

func mulGeneric[T float32 | float64](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] *= v
	}
}

func minGeneric[T float32 | float64](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		if v < dst[i] {
			dst[i] = v
		}
	}
}

func maxGeneric[T float32 | float64](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		if v > dst[i] {
			dst[i] = v
		}
	}
}

func axpyGeneric(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

func scaleGeneric(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

func reluGeneric(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		if v > 0 {
			dst[i] = v
		} else {
			dst[i] = 0
		}
	}
}

func reluBackwardGeneric(dx, dy, x []float32) {
	dx = dx[:len(x)]
	dy = dy[:len(x)]
	for i, v := range x {
		if v > 0 {
			dx[i] += dy[i]
		}
	}
}

func reluBackwardSetGeneric(dx, dy, x []float32) {
	dx = dx[:len(x)]
	dy = dy[:len(x)]
	for i, v := range x {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

func mulToGeneric(dst, x, y []float32) {
	dst = dst[:len(y)]
	x = x[:len(y)]
	for i, v := range y {
		dst[i] = x[i] * v
	}
}

func addMulToGeneric(dst, x, y []float32) {
	dst = dst[:len(y)]
	x = x[:len(y)]
	for i, v := range y {
		dst[i] += x[i] * v
	}
}

func reluMaskGeneric(dst, src []float32, mask []byte) {
	dst = dst[:len(src)]
	for i0 := 0; i0 < len(src); i0 += 8 {
		var m byte
		for l := 0; l < 8 && i0+l < len(src); l++ {
			if v := src[i0+l]; v > 0 {
				dst[i0+l] = v
				m |= 1 << l
			} else {
				dst[i0+l] = 0
			}
		}
		mask[i0/8] = m
	}
}

func reluBackwardMaskGeneric(dx, dy []float32, mask []byte, add bool) {
	dx = dx[:len(dy)]
	for i, g := range dy {
		switch {
		case mask[i/8]>>(i%8)&1 == 0:
			if !add {
				dx[i] = 0
			}
		case add:
			dx[i] += g
		default:
			dx[i] = g
		}
	}
}
