package nn

import (
	"fmt"
	"slices"
)

// Option configures a layer constructor: Stride and Padding for Conv2d and
// the pools, NoBias for Linear and Conv2d, Momentum and Eps for BatchNorm.
// Giving a layer an option it does not take panics, since it is a mistake
// in the program.
type Option struct {
	name  string
	apply func(*layerOptions)
}

type layerOptions struct {
	stride, padding [2]int
	strideSet       bool
	noBias          bool
	momentum, eps   float32
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
	return Option{"Stride", func(o *layerOptions) { o.stride = [2]int{h, w}; o.strideSet = true }}
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
	return Option{"Padding", func(o *layerOptions) { o.padding = [2]int{h, w} }}
}

// NoBias builds a Linear or Conv2d layer without a bias (PyTorch's
// bias=False); its state dict then has no "bias" entry.
func NoBias() Option {
	return Option{"NoBias", func(o *layerOptions) { o.noBias = true }}
}

// Momentum sets the weight BatchNorm gives the current batch when updating
// its running statistics (default 0.1).
func Momentum(m float32) Option {
	if m < 0 || m > 1 {
		panic(fmt.Sprintf("nn: BatchNorm momentum must be in [0, 1], got %v", m))
	}
	return Option{"Momentum", func(o *layerOptions) { o.momentum = m }}
}

// Eps sets the value BatchNorm adds to the variance for numerical stability
// (default 1e-5).
func Eps(e float32) Option {
	if e <= 0 {
		panic(fmt.Sprintf("nn: BatchNorm eps must be positive, got %v", e))
	}
	return Option{"Eps", func(o *layerOptions) { o.eps = e }}
}

// applyOptions applies opts over defaults, panicking on an option the
// layer does not take.
func applyOptions(layer string, defaults layerOptions, opts []Option, allowed ...string) layerOptions {
	o := defaults
	for _, opt := range opts {
		if opt.apply == nil {
			panic(fmt.Sprintf("nn: %s: zero Option", layer))
		}
		if !slices.Contains(allowed, opt.name) {
			panic(fmt.Sprintf("nn: %s does not take option %s", layer, opt.name))
		}
		opt.apply(&o)
	}
	return o
}
