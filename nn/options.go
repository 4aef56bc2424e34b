package nn

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/option"
)

// Option configures a layer constructor: Stride and Padding for Conv2d and
// the pools, NoBias for Linear and Conv2d, Momentum and Eps for BatchNorm.
// Giving a layer an option it does not take panics, since it is a mistake
// in the program.
type Option func(*config)

// config holds every layer option; each constructor reads its own fields.
type config struct {
	stride, padding [2]int
	strideSet       bool
	noBias          bool
	momentum, eps   float64
	option.Given
}

// Stride sets the step of a convolution or pooling window in both spatial
// dimensions (default 1 for Conv2d, the kernel size for pools).
func Stride(s int) Option {
	return StrideHW(s, s)
}

// StrideHW sets different vertical and horizontal strides.
func StrideHW(h, w int) Option {
	if h < 1 || w < 1 {
		panic(fmt.Sprintf("nn: stride must be positive, got (%d, %d)", h, w))
	}
	return func(c *config) { c.stride = [2]int{h, w}; c.strideSet = true; c.Mark("Stride") }
}

// Padding sets the implicit zero padding (-inf for MaxPool2d) added to
// both sides of both spatial dimensions (default 0).
func Padding(p int) Option {
	return PaddingHW(p, p)
}

// PaddingHW sets different vertical and horizontal padding.
func PaddingHW(h, w int) Option {
	if h < 0 || w < 0 {
		panic(fmt.Sprintf("nn: padding must not be negative, got (%d, %d)", h, w))
	}
	return func(c *config) { c.padding = [2]int{h, w}; c.Mark("Padding") }
}

// NoBias builds a Linear, Conv2d, LayerNorm or CausalSelfAttention layer
// without biases (PyTorch's bias=False); its state dict then has no
// "bias" entries.
func NoBias() Option {
	return func(c *config) { c.noBias = true; c.Mark("NoBias") }
}

// Momentum sets the weight BatchNorm gives the current batch when updating
// its running statistics (default 0.1).
func Momentum(m float64) Option {
	if !(m >= 0 && m <= 1) {
		panic(fmt.Sprintf("nn: BatchNorm momentum must be in [0, 1], got %v", m))
	}
	return func(c *config) { c.momentum = m; c.Mark("Momentum") }
}

// Eps sets the value BatchNorm and LayerNorm add to the variance for
// numerical stability (default 1e-5).
func Eps(e float64) Option {
	if !(e > 0) {
		panic(fmt.Sprintf("nn: eps must be positive, got %v", e))
	}
	return func(c *config) { c.eps = e; c.Mark("Eps") }
}

// apply runs opts over c, panicking on an option the layer does not take.
func (c config) apply(layer string, opts []Option, takes ...string) config {
	option.Apply("nn", layer, &c, &c.Given, opts, takes...)
	return c
}
