package data

import (
	"fmt"

	"github.com/gotrain/gotrain/tensor"
)

// Dataset is an indexable collection of labelled examples of one fixed
// shape.
//
// A Loader calls Example from its background goroutine while the training
// loop runs, so Example must be safe to call concurrently with the
// Dataset's other methods; the datasets of this module are read-only after
// construction.
type Dataset interface {
	// Len returns the number of examples.
	Len() int
	// Shape returns the shape of one example's features, e.g. [1 28 28].
	// The caller must not modify it.
	Shape() []int
	// Example writes example i's features into x, whose length is the
	// product of Shape, and returns its label. It panics if i is outside
	// [0, Len()) or x has the wrong length.
	Example(i int, x []float32) (label int)
}

// TensorDataset is an in-memory Dataset over a tensor of stacked features,
// like PyTorch's TensorDataset.
type TensorDataset struct {
	x       []float32
	shape   []int
	feature int
	y       []int
}

// NewTensorDataset returns a dataset whose example i is x[i] with label
// y[i]. x has shape [n, shape...]; its data is shared, not copied. It
// panics if x has no dimensions or x.Size(0) != len(y).
func NewTensorDataset(x *tensor.Tensor, y []int) *TensorDataset {
	shape := x.Shape()
	if len(shape) == 0 || shape[0] != len(y) {
		panic(fmt.Sprintf("data: NewTensorDataset: features of shape %v do not match %d labels", shape, len(y)))
	}
	ex := append([]int(nil), shape[1:]...)
	feature := 1
	for _, d := range ex {
		feature *= d
	}
	return &TensorDataset{x: x.Data(), shape: ex, feature: feature, y: y}
}

// Len implements Dataset.
func (d *TensorDataset) Len() int { return len(d.y) }

// Shape implements Dataset.
func (d *TensorDataset) Shape() []int { return d.shape }

// Example implements Dataset.
func (d *TensorDataset) Example(i int, x []float32) int {
	if len(x) != d.feature {
		panic(fmt.Sprintf("data: TensorDataset.Example: buffer of %d values for an example of shape %v", len(x), d.shape))
	}
	if uint(i) >= uint(len(d.y)) {
		panic(fmt.Sprintf("data: TensorDataset.Example: index %d outside [0, %d)", i, len(d.y)))
	}
	copy(x, d.x[i*d.feature:(i+1)*d.feature])
	return d.y[i]
}
