package nn

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/tensor"
)

// Conv2dLayer is a 2-d convolution over [N, C, H, W] inputs, PyTorch's
// nn.Conv2d. State dict entries: "weight" [Out, In/Groups, Kernel,
// Kernel] and "bias" [Out]. As for LinearLayer, change the exported
// tensors' values, never the pointers.
type Conv2dLayer struct {
	Base
	In, Out, Kernel int
	Stride, Padding [2]int // (vertical, horizontal)
	Dilation        [2]int // (vertical, horizontal); 1 is a plain kernel
	Groups          int
	Weight          *tensor.Tensor // [Out, In/Groups, Kernel, Kernel]
	Bias            *tensor.Tensor // [Out]; nil when built with NoBias
}

// Conv2d returns a convolution from in to out channels with a square
// kernel, initialised like PyTorch (kaiming-uniform a=√5 and bias
// U(±1/√fan_in), fan_in = in/groups·kernel²). Options: Stride (default
// 1), Padding (default 0), Dilation (default 1), Groups (default 1),
// NoBias.
func Conv2d(in, out, kernel int, opts ...Option) *Conv2dLayer {
	if in < 1 || out < 1 || kernel < 1 {
		panic(fmt.Sprintf("nn: Conv2d(%d, %d, kernel %d): sizes must be positive", in, out, kernel))
	}
	o := config{stride: [2]int{1, 1}, dilation: [2]int{1, 1}, groups: 1}.apply("Conv2d", opts, "Stride", "Padding", "Dilation", "Groups", "NoBias")
	if in%o.groups != 0 || out%o.groups != 0 {
		panic(fmt.Sprintf("nn: Conv2d(%d, %d, kernel %d): channels not divisible by %d groups", in, out, kernel, o.groups))
	}
	c := &Conv2dLayer{In: in, Out: out, Kernel: kernel, Stride: o.stride, Padding: o.padding, Dilation: o.dilation, Groups: o.groups}
	c.Weight = c.RegisterParameter("weight", tensor.Zeros(out, in/o.groups, kernel, kernel))
	if !o.noBias {
		c.Bias = c.RegisterParameter("bias", tensor.Zeros(out))
	}
	withInitRNG(c.ResetParameters)
	return c
}

// ResetParameters redraws the weight and bias from rng as Conv2d does.
func (c *Conv2dLayer) ResetParameters(rng *tensor.RNG) {
	KaimingUniform(rng, c.Weight, math.Sqrt(5))
	if c.Bias != nil {
		biasInit(rng, c.Bias, FanIn(c.Weight.Shape()))
	}
}

// String describes the layer like PyTorch's repr.
func (c *Conv2dLayer) String() string {
	s := fmt.Sprintf("Conv2d(%d, %d, kernel_size=(%d, %d), stride=%s", c.In, c.Out, c.Kernel, c.Kernel, pyPair(c.Stride))
	if c.Padding != [2]int{} {
		s += ", padding=" + pyPair(c.Padding)
	}
	if c.Dilation != [2]int{1, 1} {
		s += ", dilation=" + pyPair(c.Dilation)
	}
	if c.Groups != 1 {
		s += fmt.Sprintf(", groups=%d", c.Groups)
	}
	if c.Bias == nil {
		s += ", bias=False"
	}
	return s + ")"
}

// Forward convolves x of shape [N, In, H, W] (or unbatched [In, H, W]) into
// [N, Out, H', W'] with H' = (H + 2·pad − dilation·(kernel−1) − 1)/stride
// + 1. It panics,
// naming the layer and the input shape, if x has the wrong rank or channel
// count or is smaller than the kernel.
func (c *Conv2dLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	shape := x.Shape()
	if len(shape) == 3 {
		y := c.Forward(x.Reshape(append([]int{1}, shape...)...))
		return y.Reshape(y.Shape()[1:]...)
	}
	if len(shape) != 4 {
		panic(fmt.Sprintf("nn: %s: input %v is not [N, C, H, W]", c.label(), shape))
	}
	c.check(shape)
	return tensor.Conv2dWith(x, c.Weight, c.Bias, c.options())
}

// options are the layer's geometry for tensor.Conv2dWith.
func (c *Conv2dLayer) options() tensor.ConvOptions {
	return tensor.ConvOptions{Stride: c.Stride, Padding: c.Padding, Dilation: c.Dilation, Groups: c.Groups}
}

// check panics, naming the layer, if a 4-d input shape does not fit it.
func (c *Conv2dLayer) check(shape []int) {
	if shape[1] != c.In {
		panic(fmt.Sprintf("nn: %s: input %v does not match in_channels %d", c.label(), shape, c.In))
	}
	checkWindow(c.label, shape, c.Kernel, c.Padding)
	if c.Dilation == [2]int{1, 1} {
		return
	}
	// The dilated kernel's extent must fit.
	eh, ew := c.Dilation[0]*(c.Kernel-1)+1, c.Dilation[1]*(c.Kernel-1)+1
	if h, w := shape[2]+2*c.Padding[0], shape[3]+2*c.Padding[1]; h < eh || w < ew {
		panic(fmt.Sprintf("nn: %s: input %v (padded %dx%d) is smaller than the dilated kernel %dx%d", c.label(), shape, h, w, eh, ew))
	}
}

// outSize returns the output height and width for a 4-d input shape.
func (c *Conv2dLayer) outSize(shape []int) (oh, ow int) {
	k := c.Kernel
	return (shape[2]+2*c.Padding[0]-c.Dilation[0]*(k-1)-1)/c.Stride[0] + 1, (shape[3]+2*c.Padding[1]-c.Dilation[1]*(k-1)-1)/c.Stride[1] + 1
}

// label names the layer in panic messages.
func (c *Conv2dLayer) label() string {
	return fmt.Sprintf("Conv2d(%d→%d, kernel %d)", c.In, c.Out, c.Kernel)
}

// checkWindow panics if a kernel does not fit the padded input. label is
// only called then, so that Forward does not format on every call.
func checkWindow(label func() string, shape []int, kernel int, padding [2]int) {
	h, w := shape[2]+2*padding[0], shape[3]+2*padding[1]
	if h < kernel || w < kernel {
		panic(fmt.Sprintf("nn: %s: input %v (padded %dx%d) is smaller than the kernel %dx%d", label(), shape, h, w, kernel, kernel))
	}
}

// Pool2dLayer is MaxPool2d or AvgPool2d: a pooling window over [N, C, H, W]
// inputs, with no parameters.
type Pool2dLayer struct {
	Base
	Max             bool // max pooling; average pooling otherwise
	Kernel          int
	Stride, Padding [2]int
}

// MaxPool2d returns max pooling with a square window, PyTorch's
// nn.MaxPool2d. Options: Stride (default: the kernel size), Padding
// (default 0; padded cells never win, and padding must be at most half
// the kernel).
func MaxPool2d(kernel int, opts ...Option) *Pool2dLayer {
	return newPool("MaxPool2d", true, kernel, opts)
}

// AvgPool2d returns average pooling with a square window, PyTorch's
// nn.AvgPool2d (padded zeros count in the average, as with PyTorch's
// default count_include_pad). Options as for MaxPool2d.
func AvgPool2d(kernel int, opts ...Option) *Pool2dLayer {
	return newPool("AvgPool2d", false, kernel, opts)
}

func newPool(name string, isMax bool, kernel int, opts []Option) *Pool2dLayer {
	if kernel < 1 {
		panic(fmt.Sprintf("nn: %s(%d): kernel must be positive", name, kernel))
	}
	o := config{}.apply(name, opts, "Stride", "Padding")
	if !o.strideSet {
		o.stride = [2]int{kernel, kernel}
	}
	if 2*o.padding[0] > kernel || 2*o.padding[1] > kernel {
		panic(fmt.Sprintf("nn: %s(%d): padding %v exceeds half the kernel", name, kernel, o.padding))
	}
	return &Pool2dLayer{Max: isMax, Kernel: kernel, Stride: o.stride, Padding: o.padding}
}

func (p *Pool2dLayer) kind() string {
	if p.Max {
		return "MaxPool2d"
	}
	return "AvgPool2d"
}

func (p *Pool2dLayer) label() string { return fmt.Sprintf("%s(%d)", p.kind(), p.Kernel) }

// String describes the layer like PyTorch's repr.
func (p *Pool2dLayer) String() string {
	s := fmt.Sprintf("%s(kernel_size=%d, stride=%s, padding=%s", p.kind(), p.Kernel, pyIntOrPair(p.Stride), pyIntOrPair(p.Padding))
	if p.Max {
		s += ", dilation=1, ceil_mode=False"
	}
	return s + ")"
}

// Forward pools x of shape [N, C, H, W] (or unbatched [C, H, W]).
func (p *Pool2dLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	shape := x.Shape()
	if len(shape) == 3 {
		y := p.Forward(x.Reshape(append([]int{1}, shape...)...))
		return y.Reshape(y.Shape()[1:]...)
	}
	if len(shape) != 4 {
		panic(fmt.Sprintf("nn: %s: input %v is not [N, C, H, W]", p.label(), shape))
	}
	checkWindow(p.label, shape, p.Kernel, p.Padding)
	k := [2]int{p.Kernel, p.Kernel}
	if p.Max {
		return tensor.MaxPool2d(x, k, p.Stride, p.Padding)
	}
	return tensor.AvgPool2d(x, k, p.Stride, p.Padding)
}
