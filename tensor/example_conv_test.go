package tensor_test

import (
	"fmt"

	"github.com/gotrain/gotrain/tensor"
)

// A depthwise, dilated convolution: each of the two channels has its own
// 2×2 kernel whose taps are two pixels apart.
func ExampleConv2dWith() {
	x := tensor.New([]float32{
		1, 2, 3,
		4, 5, 6,
		7, 8, 9,
		// second channel
		1, 1, 1,
		1, 1, 1,
		1, 1, 1,
	}, 1, 2, 3, 3)
	w := tensor.Full(1, 2, 1, 2, 2) // [O=2, C/groups=1, 2, 2]
	y := tensor.Conv2dWith(x, w, nil, tensor.ConvOptions{Dilation: [2]int{2, 2}, Groups: 2})
	fmt.Println(y.Shape(), y.Data()) // corners summed: 1+3+7+9, and 4 ones
	// Output:
	// [1 2 1 1] [20 4]
}

// Under Autocast(BF16), products take bfloat16 operands (here emulated:
// rounded, then multiplied in float32); results stay float32.
func ExampleAutocast() {
	x := tensor.New([]float32{1.001, 3.14159}, 1, 2)
	w := tensor.New([]float32{1, 1}, 1, 2)
	fmt.Println(tensor.Linear(x, w, nil).Data())
	tensor.SetBF16Emulation(true) // no bf16 kernel needed
	defer tensor.SetBF16Emulation(false)
	err := tensor.Autocast(tensor.BF16, func() {
		fmt.Println(tensor.Linear(x, w, nil).Data()) // 1 + 3.140625
	})
	fmt.Println(err, tensor.ToBFloat16(3.14159).Float32())
	// Output:
	// [4.14259]
	// [4.140625]
	// <nil> 3.140625
}
