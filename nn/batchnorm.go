package nn

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/tensor"
)

// BatchNormLayer is batch normalisation over the channel dimension 1,
// PyTorch's nn.BatchNorm1d ([N, C] or [N, C, L] inputs) and nn.BatchNorm2d
// ([N, C, H, W]), with an affine transform and tracked running statistics.
//
// State dict entries, in PyTorch's order: parameters "weight" and "bias"
// [C]; buffers "running_mean" and "running_var" [C] and
// "num_batches_tracked", a 0-d counter whose PyTorch type is int64 (its
// Named.Dtype is Int64; the value is held as a float32).
//
// In training mode Forward normalises with the batch's statistics and
// updates the running ones (running = (1−momentum)·running +
// momentum·batch, with the unbiased batch variance) and counts the batch;
// in eval mode it normalises with the running statistics.
type BatchNormLayer struct {
	Base
	Dims              int // 1 for BatchNorm1d, 2 for BatchNorm2d
	Features          int
	Momentum, Eps     float64
	Weight, Bias      *tensor.Tensor // [Features]
	RunningMean       *tensor.Tensor // [Features]
	RunningVar        *tensor.Tensor // [Features]
	NumBatchesTracked *tensor.Tensor // 0-d
	// Sync, when set, makes the layer a SyncBatchNorm: in training its
	// batch statistics, and their gradients, are summed over the replicas
	// of a data-parallel job through Sync (ddp.ConvertSyncBatchNorm sets
	// it), so that each replica normalises its slice with the statistics
	// of the global batch. Nil keeps them to the local batch.
	Sync StatsReducer
}

// StatsReducer sums per-channel batch statistics over the replicas of a
// data-parallel job for BatchNormLayer.Sync. ReduceStats replaces buf by
// its element-wise sum over every replica, the same on all; every replica
// calls it with buffers of the same length in the same order. On an error
// the layer goes on with its local statistics for that call: the reducer
// keeps the error and reports it (package ddp's from the next Backward).
type StatsReducer interface {
	ReduceStats(buf []float64) error
}

// BatchNorm1d returns batch normalisation for [N, C] or [N, C, L] inputs
// with C = features. Options: Momentum (default 0.1), Eps (default 1e-5).
func BatchNorm1d(features int, opts ...Option) *BatchNormLayer {
	return newBatchNorm(1, features, opts)
}

// BatchNorm2d returns batch normalisation for [N, C, H, W] inputs with
// C = features. Options: Momentum (default 0.1), Eps (default 1e-5).
func BatchNorm2d(features int, opts ...Option) *BatchNormLayer {
	return newBatchNorm(2, features, opts)
}

func newBatchNorm(dims, features int, opts []Option) *BatchNormLayer {
	name := fmt.Sprintf("BatchNorm%dd", dims)
	if features < 1 {
		panic(fmt.Sprintf("nn: %s(%d): features must be positive", name, features))
	}
	o := config{momentum: 0.1, eps: 1e-5}.apply(name, opts, "Momentum", "Eps")
	b := &BatchNormLayer{Dims: dims, Features: features, Momentum: o.momentum, Eps: o.eps}
	b.Weight = b.RegisterParameter("weight", tensor.Zeros(features))
	b.Bias = b.RegisterParameter("bias", tensor.Zeros(features))
	b.RunningMean = b.RegisterBuffer("running_mean", tensor.Zeros(features), Float32)
	b.RunningVar = b.RegisterBuffer("running_var", tensor.Zeros(features), Float32)
	b.NumBatchesTracked = b.RegisterBuffer("num_batches_tracked", tensor.Scalar(0), Int64)
	b.ResetParameters(nil)
	return b
}

// ResetParameters sets weight to 1, bias to 0, the running statistics to
// mean 0 and variance 1 and the batch count to 0; it draws nothing from
// rng, which may be nil.
func (b *BatchNormLayer) ResetParameters(*tensor.RNG) {
	fill(b.Weight, 1)
	fill(b.Bias, 0)
	fill(b.RunningMean, 0)
	fill(b.RunningVar, 1)
	fill(b.NumBatchesTracked, 0)
}

func (b *BatchNormLayer) name() string { return fmt.Sprintf("BatchNorm%dd(%d)", b.Dims, b.Features) }

// String describes the layer like PyTorch's repr.
func (b *BatchNormLayer) String() string {
	kind := fmt.Sprintf("BatchNorm%dd", b.Dims)
	if b.Sync != nil {
		kind = "SyncBatchNorm"
	}
	return fmt.Sprintf("%s(%d, eps=%g, momentum=%g, affine=True, track_running_stats=True)",
		kind, b.Features, b.Eps, b.Momentum)
}

// Forward normalises x. It panics, naming the layer and the input shape,
// if x's rank or channel count does not fit, or if a training batch has a
// single value per channel (its variance is undefined; with Sync, over
// all replicas).
func (b *BatchNormLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	training := b.check(x)
	if training && b.Sync != nil {
		b.NumBatchesTracked.Data()[0]++
		return tensor.BatchNormSync(x, b.Weight, b.Bias, b.RunningMean, b.RunningVar, float32(b.Momentum), float32(b.Eps), b.Sync.ReduceStats)
	}
	if training {
		b.NumBatchesTracked.Data()[0]++
	}
	return tensor.BatchNorm(x, b.Weight, b.Bias, b.RunningMean, b.RunningVar, training, float32(b.Momentum), float32(b.Eps))
}

// ForwardReLU returns relu(Forward(x) + residual), or relu(Forward(x))
// for a nil residual, as one op (tensor.BatchNormReLU) with the same
// results and fewer passes over memory; a SyncBatchNorm layer runs the
// separate ops. It panics as Forward does, or if residual's shape is not
// x's. The layer's forward hooks do not run: a caller that honours them
// calls Forward through Call when HasForwardHooks reports any.
func (b *BatchNormLayer) ForwardReLU(x, residual *tensor.Tensor) *tensor.Tensor {
	if residual != nil && !slices.Equal(residual.Shape(), x.Shape()) {
		panic(fmt.Sprintf("nn: %s: residual %v does not match input %v", b.name(), residual.Shape(), x.Shape()))
	}
	training := b.check(x)
	if training && b.Sync != nil {
		y := b.Forward(x)
		if residual != nil {
			y = tensor.Add(y, residual)
		}
		return tensor.ReLU(y)
	}
	if training {
		b.NumBatchesTracked.Data()[0]++
	}
	return tensor.BatchNormReLU(x, b.Weight, b.Bias, b.RunningMean, b.RunningVar, residual, training, float32(b.Momentum), float32(b.Eps))
}

// check panics, naming the layer and the input shape, if x does not fit
// the layer (see Forward), and returns whether the layer is training.
func (b *BatchNormLayer) check(x *tensor.Tensor) (training bool) {
	shape := x.Shape()
	okRank := len(shape) == 4
	if b.Dims == 1 {
		okRank = len(shape) == 2 || len(shape) == 3
	}
	if !okRank {
		want := "[N, C, H, W]"
		if b.Dims == 1 {
			want = "[N, C] or [N, C, L]"
		}
		panic(fmt.Sprintf("nn: %s: input %v is not %s", b.name(), shape, want))
	}
	if shape[1] != b.Features {
		panic(fmt.Sprintf("nn: %s: input %v does not match num_features %d", b.name(), shape, b.Features))
	}
	training = b.Training()
	// With Sync the values per channel are counted over all replicas: a
	// replica may hold few or none.
	if training && b.Sync == nil {
		if perChannel := x.Len() / b.Features; perChannel < 2 {
			panic(fmt.Sprintf("nn: %s: input %v has %d value per channel; training needs more than 1", b.name(), shape, perChannel))
		}
	}
	return training
}
