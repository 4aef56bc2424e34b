package kernels

// Axpy computes y[i] += alpha·x[i]. len(x) must equal len(y).
func Axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// Scale computes x[i] *= alpha.
func Scale(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// Add computes dst[i] += src[i] (float32). len(src) must equal len(dst).
func Add(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] += v
	}
}

// Sum returns Σ x[i].
func Sum(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}

// Mul computes dst[i] *= src[i].
func Mul(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] *= v
	}
}

// Min computes dst[i] = min(dst[i], src[i]).
func Min(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		if v < dst[i] {
			dst[i] = v
		}
	}
}

// Max computes dst[i] = max(dst[i], src[i]).
func Max(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		if v > dst[i] {
			dst[i] = v
		}
	}
}

// Add64 computes dst[i] += src[i] (float64).
func Add64(dst, src []float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] += v
	}
}

// Mul64 computes dst[i] *= src[i] (float64).
func Mul64(dst, src []float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] *= v
	}
}

// Min64 computes dst[i] = min(dst[i], src[i]) (float64).
func Min64(dst, src []float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		if v < dst[i] {
			dst[i] = v
		}
	}
}

// Max64 computes dst[i] = max(dst[i], src[i]) (float64).
func Max64(dst, src []float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		if v > dst[i] {
			dst[i] = v
		}
	}
}

// Relu computes dst[i] = max(src[i], 0).
func Relu(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		if v > 0 {
			dst[i] = v
		} else {
			dst[i] = 0
		}
	}
}

// ReluBackward accumulates dx[i] += dy[i] where x[i] > 0.
func ReluBackward(dx, dy, x []float32) {
	dx = dx[:len(x)]
	dy = dy[:len(x)]
	for i, v := range x {
		if v > 0 {
			dx[i] += dy[i]
		}
	}
}

// AddBias adds bias[j] to every row of the rows×len(bias) matrix x.
func AddBias(x []float32, rows int, bias []float32) {
	n := len(bias)
	for r := 0; r < rows; r++ {
		Add(x[r*n:(r+1)*n], bias)
	}
}

// SumRows accumulates dst[j] += Σ_r x[r*len(dst)+j] (the bias gradient).
func SumRows(dst, x []float32, rows int) {
	n := len(dst)
	for r := 0; r < rows; r++ {
		Add(dst, x[r*n:(r+1)*n])
	}
}
