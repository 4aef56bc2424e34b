package ddp

import (
	"context"
	"slices"
)

// BucketParam is where one parameter's gradient lies in a bucket.
type BucketParam struct {
	// Param is the parameter's index in Model.Parameters: it names the
	// same parameter whatever bucket it lands in when the buckets are
	// rebuilt, so state kept per parameter survives the rebuild.
	Param int
	// Offset is the gradient's first element in Bucket.Data.
	Offset int
	// Shape is the parameter's shape; its gradient is Data[Offset:Offset+numel]
	// in row-major order.
	Shape []int
}

// Bucket is one bucket of gradients as a BucketHook sees it.
type Bucket struct {
	// Index is the bucket's place in the reduction order of a backward
	// pass, from 0.
	Index int
	// Last is set on the last bucket of a backward pass: a hook counting
	// steps counts them here.
	Last bool
	// Data holds this rank's gradients, concatenated; on a nil return it
	// must hold their average over the group, identical on every rank.
	Data []float32
	// Params lists the parameters in Data, in order.
	Params []BucketParam
}

// BucketHook reduces one bucket of gradients across the group, like a
// CommHook, seeing the parameters the bucket holds, for hooks that treat
// each gradient as a matrix or keep state per parameter (PowerSGD). It
// runs where a CommHook would, one bucket at a time in bucket order, and
// must not retain b.Data or b.Params after returning.
type BucketHook interface {
	ReduceBucket(ctx context.Context, g Group, b Bucket) error
}

// WithBucketHook replaces the bucket reduction with h, like WithCommHook
// (the later of the two options wins). It panics if h is nil.
func WithBucketHook(h BucketHook) Option {
	if h == nil {
		panic("ddp: WithBucketHook: nil hook")
	}
	return func(c *config) { c.bucketHook = h }
}

// bucketLayouts describes each planned bucket's parameters for a BucketHook.
func bucketLayouts(plans []bucketPlan, params [][]int) [][]BucketParam {
	out := make([][]BucketParam, len(plans))
	for b, pl := range plans {
		out[b] = make([]BucketParam, len(pl.params))
		for s, p := range pl.params {
			out[b][s] = BucketParam{Param: p, Offset: pl.offsets[s], Shape: slices.Clone(params[p])}
		}
	}
	return out
}
