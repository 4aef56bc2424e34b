package tensor

import "fmt"

// SetData replaces the storage of leaf t with data, which must hold as
// many values as t's shape or none: an empty data releases the storage
// while t keeps its shape, autograd hooks and gradient (Len is then 0, as
// for a recycled tensor). Sharded data parallelism uses it to hold a
// parameter's values only while the layers using it run. It panics on a
// non-leaf tensor or a length that fits neither.
func (t *Tensor) SetData(data []float32) {
	if t.node != nil {
		panic("tensor: SetData on a non-leaf tensor")
	}
	if len(data) != 0 && len(data) != numel(t.shape) {
		panic(fmt.Sprintf("tensor: SetData: %d values do not fill shape %v (%d)", len(data), t.shape, numel(t.shape)))
	}
	t.data = data
}
