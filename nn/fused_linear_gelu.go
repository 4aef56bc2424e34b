package nn

import "github.com/gotrain/gotrain/tensor"

// LinearGELU is act.Forward(lin.Forward(x)), a feed-forward layer's
// projection and activation, with the exact GELU taken as one fused op
// (tensor.LinearGELU: no pre-activation tensor, and a backward pass that
// multiplies by GELU' and sums the bias gradient in one sweep). The tanh
// GELU runs the two layers one after the other. Shape mistakes panic
// naming lin, as its Forward does.
func LinearGELU(lin *LinearLayer, act *GELULayer, x *tensor.Tensor) *tensor.Tensor {
	if act.Tanh {
		h := lin.Forward(x)
		a := act.Forward(h)
		tensor.Recycle(h) // only the graph reads it
		return a
	}
	s := x.Shape()
	if len(s) == 0 || s[len(s)-1] != lin.In {
		return lin.Forward(x) // panics naming the layer and the shapes
	}
	return tensor.LinearGELU(x, lin.Weight, lin.Bias)
}
