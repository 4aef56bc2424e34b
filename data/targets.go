package data

import (
	"fmt"

	"github.com/gotrain/gotrain/tensor"
)

// TargetDataset is an indexable collection of examples of one fixed shape
// whose targets are float32 values of one fixed shape: a regression's
// examples (a value, a vector, an image to reconstruct). A Loader made by
// NewTargetLoader batches them into Batch.X and Batch.Target.
//
// As for Dataset, Example must be safe to call concurrently with the
// dataset's other methods.
type TargetDataset interface {
	// Len returns the number of examples.
	Len() int
	// Shape returns the shape of one example's features, e.g. [3]. The
	// caller must not modify it.
	Shape() []int
	// TargetShape returns the shape of one example's target, e.g. [1].
	// The caller must not modify it.
	TargetShape() []int
	// Example writes example i's features into x and its target into
	// target, whose lengths are the products of Shape and TargetShape. It
	// panics if i is outside [0, Len()) or a buffer has the wrong length.
	Example(i int, x, target []float32)
}

// TensorTargetDataset is an in-memory TargetDataset over a tensor of
// stacked features and one of stacked targets, like PyTorch's
// TensorDataset(x, y) with a float y.
type TensorTargetDataset struct {
	x, y       []float32
	xs, ys     []int // the shapes of one example's features and target
	xlen, ylen int
	n          int
}

// NewTensorTargetDataset returns a dataset whose example i is x[i] with
// target y[i]. x has shape [n, shape...] and y [n, target shape...] (y of
// shape [n] gives targets of shape [1]); their data is shared, not
// copied. It panics if either has no dimensions or their first
// dimensions differ.
func NewTensorTargetDataset(x, y *tensor.Tensor) *TensorTargetDataset {
	xs, ys := x.Shape(), y.Shape()
	if len(xs) == 0 || len(ys) == 0 || xs[0] != ys[0] {
		panic(fmt.Sprintf("data: NewTensorTargetDataset: features of shape %v do not match targets of shape %v", xs, ys))
	}
	d := &TensorTargetDataset{x: x.Data(), y: y.Data(), xs: append([]int(nil), xs[1:]...), ys: append([]int(nil), ys[1:]...), n: xs[0]}
	if len(d.ys) == 0 {
		d.ys = []int{1}
	}
	d.xlen, d.ylen = product(d.xs), product(d.ys)
	return d
}

func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Len implements TargetDataset.
func (d *TensorTargetDataset) Len() int { return d.n }

// Shape implements TargetDataset.
func (d *TensorTargetDataset) Shape() []int { return d.xs }

// TargetShape implements TargetDataset.
func (d *TensorTargetDataset) TargetShape() []int { return d.ys }

// Example implements TargetDataset.
func (d *TensorTargetDataset) Example(i int, x, target []float32) {
	if len(x) != d.xlen || len(target) != d.ylen {
		panic(fmt.Sprintf("data: TensorTargetDataset.Example: buffers of %d and %d values for an example of shape %v and a target of shape %v",
			len(x), len(target), d.xs, d.ys))
	}
	if uint(i) >= uint(d.n) {
		panic(fmt.Sprintf("data: TensorTargetDataset.Example: index %d outside [0, %d)", i, d.n))
	}
	copy(x, d.x[i*d.xlen:(i+1)*d.xlen])
	copy(target, d.y[i*d.ylen:(i+1)*d.ylen])
}

// NewTargetLoader returns a Loader of batches of batchSize examples of
// ds, in the order sampler gives: each Batch has X of [n, ds.Shape()...]
// and Target of [n, ds.TargetShape()...]. It takes NewLoader's options and
// panics like it.
func NewTargetLoader(ds TargetDataset, batchSize int, sampler Sampler, opts ...Option) *Loader {
	if ds == nil || sampler == nil {
		panic("data: NewTargetLoader: nil dataset or sampler")
	}
	cfg := loaderConfig("NewTargetLoader", batchSize, opts)
	shape := append([]int(nil), ds.Shape()...)
	tshape := append([]int(nil), ds.TargetShape()...)
	return &Loader{tds: ds, sampler: sampler, batchSize: batchSize, cfg: cfg,
		shape: shape, feature: product(shape), tshape: tshape, tfeature: product(tshape)}
}
