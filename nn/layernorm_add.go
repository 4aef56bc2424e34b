package nn

import (
	"fmt"

	"github.com/gotrain/gotrain/tensor"
)

// AddForward returns sum = x + y and this layer applied to it, computed
// in one pass (tensor.AddLayerNorm): a pre-LayerNorm block's residual
// connection followed by its next normalisation. x and y must have the
// same shape, ending in Dim.
func (l *LayerNormLayer) AddForward(x, y *tensor.Tensor) (sum, norm *tensor.Tensor) {
	s := x.Shape()
	if len(s) == 0 || s[len(s)-1] != l.Dim {
		panic(fmt.Sprintf("nn: %s: input %v does not end in %d", l, s, l.Dim))
	}
	return tensor.AddLayerNorm(x, y, l.Weight, l.Bias, float32(l.Eps))
}
