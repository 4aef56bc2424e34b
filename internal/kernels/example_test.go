package kernels_test

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/kernels"
)

// A Linear layer's forward pass, y = x·Wᵀ, with W stored [out,in] as in
// PyTorch: transB absorbs the transpose, no copy is made.
func ExampleSgemm() {
	x := []float32{ // 2 samples × 3 features
		1, 2, 3,
		4, 5, 6,
	}
	w := []float32{ // 2 outputs × 3 features
		1, 0, -1,
		0.5, 0.5, 0.5,
	}
	y := make([]float32, 2*2)
	kernels.Sgemm(false, true, 2, 2, 3, 1, x, 3, w, 3, 0, y, 2)
	fmt.Println(y)

	// Backward: dW += dyᵀ·x accumulates into the gradient with beta = 1.
	dy := []float32{1, 0, 0, 1}
	dw := make([]float32, 2*3)
	kernels.Sgemm(true, false, 2, 3, 2, 1, dy, 2, x, 3, 1, dw, 3)
	fmt.Println(dw)
	// Output:
	// [-2 3 -2 7.5]
	// [1 2 3 4 5 6]
}

// The launcher gives each worker its share of the cores through
// GOTRAIN_NUM_THREADS; a program may also set it directly.
func ExampleSetNumThreads() {
	prev := kernels.SetNumThreads(1)
	defer kernels.SetNumThreads(prev)
	fmt.Println(kernels.NumThreads())
	// Output: 1
}

// Rounding to bfloat16 keeps 8 significant bits, ties to even: what a bf16
// GEMM multiplies.
func ExampleRoundBF16() {
	x := []float32{1, 3.14159265, 1.00390625, 1.01171875}
	kernels.RoundBF16(x, x)
	fmt.Println(x)
	// Output:
	// [1 3.140625 1 1.015625]
}

// Im2colRows builds the columns of some output rows only: here rows 1..2
// of a 1-channel 3×3 image under a 2×2 kernel (output 2×2).
func ExampleIm2colRows() {
	img := []float32{
		1, 2, 3,
		4, 5, 6,
		7, 8, 9,
	}
	s := kernels.ConvShape{C: 1, H: 3, W: 3, KH: 2, KW: 2, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1}
	col := make([]float32, 4*2) // 4 taps × the 2 outputs of row 1
	kernels.Im2colRows(img, s, 1, 2, col)
	fmt.Println(s.OH(), s.OW(), col)
	// Output:
	// 2 2 [4 5 5 6 7 8 8 9]
}

// SgemmBF16 multiplies bf16-rounded operands with float32 sums, on the
// AMX or AVX512_BF16 unit where there is one (BF16Kernel names it) and
// emulated elsewhere; the products of such operands are exact, so small
// integer-valued sums come out the same on every path.
func ExampleSgemmBF16() {
	a := []float32{1.001, 2, 3, 4} // 1.001 rounds to 1 in bf16
	b := []float32{1, 1, 1, 1}
	c := make([]float32, 4)
	kernels.SgemmBF16(false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2)
	fmt.Println(c)
	// Output: [3 3 7 7]
}
