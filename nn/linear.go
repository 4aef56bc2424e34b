package nn

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/tensor"
)

// LinearLayer is a fully connected layer, y = x·Wᵀ + b, PyTorch's
// nn.Linear. Its state dict entries are "weight" [out, in] and "bias" [out].
//
// The exported tensors are the registered ones that state dicts,
// optimizers and DDP see: change their values, never the pointers.
type LinearLayer struct {
	Base
	In, Out int
	Weight  *tensor.Tensor // [Out, In]
	Bias    *tensor.Tensor // [Out]; nil when built with NoBias
}

// Linear returns a fully connected layer from in to out features,
// initialised like PyTorch (weight kaiming-uniform with a=√5, i.e.
// U(±1/√in); bias U(±1/√in)) from the generator SetSeed controls.
// Options: NoBias.
func Linear(in, out int, opts ...Option) *LinearLayer {
	if in < 0 || out < 0 {
		panic(fmt.Sprintf("nn: Linear(%d, %d): negative size", in, out))
	}
	o := config{}.apply("Linear", opts, "NoBias")
	l := &LinearLayer{In: in, Out: out}
	l.Weight = l.RegisterParameter("weight", tensor.Zeros(out, in))
	if !o.noBias {
		l.Bias = l.RegisterParameter("bias", tensor.Zeros(out))
	}
	withInitRNG(l.ResetParameters)
	return l
}

// ResetParameters redraws the weight and bias from rng as Linear does.
func (l *LinearLayer) ResetParameters(rng *tensor.RNG) {
	if l.In == 0 { // PyTorch skips kaiming for empty fan-in; keep zeros.
		fill(l.Weight, 0)
	} else {
		KaimingUniform(rng, l.Weight, math.Sqrt(5))
	}
	if l.Bias != nil {
		biasInit(rng, l.Bias, l.In)
	}
}

// String describes the layer like PyTorch's repr.
func (l *LinearLayer) String() string {
	return fmt.Sprintf("Linear(in_features=%d, out_features=%d, bias=%s)", l.In, l.Out, pyBool(l.Bias != nil))
}

// Forward maps x of shape [..., In] to [..., Out]. It panics, naming the
// layer and both shapes, if x's last dimension is not In.
func (l *LinearLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	shape := x.Shape()
	if len(shape) == 0 || shape[len(shape)-1] != l.In {
		panic(fmt.Sprintf("nn: Linear(%d→%d): input %v does not match in_features %d", l.In, l.Out, shape, l.In))
	}
	return tensor.Linear(x, l.Weight, l.Bias)
}
