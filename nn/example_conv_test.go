package nn_test

import (
	"fmt"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// A depthwise convolution (one 3×3 filter per channel, Groups = channels)
// with dilation 2, as PyTorch builds it.
func ExampleDilation() {
	c := nn.Conv2d(8, 8, 3, nn.Groups(8), nn.Dilation(2), nn.Padding(2))
	fmt.Println(c)
	fmt.Println(c.Weight.Shape())
	y := c.Forward(tensor.Zeros(1, 8, 10, 10))
	fmt.Println(y.Shape())
	// Output:
	// Conv2d(8, 8, kernel_size=(3, 3), stride=(1, 1), padding=(2, 2), dilation=(2, 2), groups=8)
	// [8 1 3 3]
	// [1 8 10 10]
}
