// Package tensor provides float32 N-dimensional tensors and reverse-mode
// automatic differentiation.
//
// Tensors are row-major and always contiguous: Reshape and Flatten share
// data, transposes are materialised or expressed as flags on MatMul. A
// tensor created by an op on inputs that require gradients records a
// backward closure; Backward walks those closures in reverse topological
// order and accumulates gradients into the leaves' Grad.
//
// The ops are package functions: elementwise arithmetic with NumPy
// broadcasting (Add, Mul, MaskedFill, …), activations (ReLU, GELU,
// GELUTanh, …), reductions (Sum, Mean, Var, Max), shape ops (Permute,
// TransposeDims, Unbind, Narrow, Cat), MatMul over broadcast batches, and
// fused layer primitives with hand-written backward passes (Linear,
// Conv2d, MaxPool2d, AvgPool2d, BatchNorm, LayerNorm, Embedding of integer
// token ids, ScaledDotProductAttention, SelfAttentionQKV, Dropout, CrossEntropy,
// CrossEntropyIgnore). Only primitives have
// derivatives; composites such as Mean and Var are built from them. Large
// ops spread over up to kernels.NumThreads goroutines (GOTRAIN_NUM_THREADS).
//
// Shape mistakes are programming errors and panic with a message that starts
// with "tensor:"; Backward returns an error for everything else.
package tensor

import (
	"fmt"
	"strings"
)

// Tensor is a float32 N-d array, optionally tracked by autograd.
//
// A Tensor is not safe for concurrent mutation; reading Data from several
// goroutines while nothing writes is fine.
type Tensor struct {
	data  []float32
	shape []int

	requiresGrad bool
	// grad is the accumulated gradient of a leaf; nil until the first
	// Backward that reaches it (or SetGrad).
	grad *Tensor
	// gradZero marks a grad that ZeroGrad has zeroed without writing to
	// it yet: it is cleared when anything reads it or adds to it, unless a
	// backward pass first overwrites it whole (gradDst).
	gradZero bool
	// node records how a non-leaf was computed; nil for leaves and for
	// results computed without grad.
	node *node
	// hooks fire when this leaf's gradient is final in a backward pass.
	hooks []hookEntry
	// preHooks fire when this non-leaf's gradient is complete, before the
	// op that produced it runs backward (see AddBackwardPreHook).
	preHooks []hookEntry
	// passGrad is a non-leaf's gradient during one backward pass.
	passGrad []float32
	// released marks a non-leaf whose recorded history an earlier Backward
	// freed; differentiating through it again is an error.
	released bool
	// recycle marks an intermediate result only the graph reads (see
	// freeWithGraph): releasing its history hands its storage back for
	// reuse.
	recycle bool
}

// New wraps data (not copied) in a tensor of the given shape. It panics if
// len(data) is not the product of shape.
func New(data []float32, shape ...int) *Tensor {
	n := numel(shape)
	if len(data) != n {
		panic(fmt.Sprintf("tensor: New: %d values do not fill shape %v (%d)", len(data), shape, n))
	}
	return &Tensor{data: data, shape: append([]int(nil), shape...)}
}

// Zeros returns a new zero-filled tensor.
func Zeros(shape ...int) *Tensor {
	return &Tensor{data: make([]float32, numel(shape)), shape: append([]int(nil), shape...)}
}

// Full returns a new tensor with every element set to v.
func Full(v float32, shape ...int) *Tensor {
	t := Zeros(shape...)
	for i := range t.data {
		t.data[i] = v
	}
	return t
}

// Scalar returns a 0-d tensor holding v.
func Scalar(v float32) *Tensor { return &Tensor{data: []float32{v}, shape: []int{}} }

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

// Shape returns the tensor's dimensions. The caller must not modify it.
func (t *Tensor) Shape() []int { return t.shape }

// Dim returns the number of dimensions.
func (t *Tensor) Dim() int { return len(t.shape) }

// Size returns dimension i; negative i counts from the end.
func (t *Tensor) Size(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// Len returns the number of elements.
func (t *Tensor) Len() int { return len(t.data) }

// Data returns the underlying row-major storage (not a copy). Writing to it
// changes the tensor; do not do so for tensors autograd still needs.
func (t *Tensor) Data() []float32 { return t.data }

// Item returns the single value of a one-element tensor.
func (t *Tensor) Item() float32 {
	if len(t.data) != 1 {
		panic(fmt.Sprintf("tensor: Item on tensor of shape %v", t.shape))
	}
	return t.data[0]
}

// RequiresGrad reports whether autograd tracks this tensor.
func (t *Tensor) RequiresGrad() bool { return t.requiresGrad }

// SetRequiresGrad marks a leaf tensor as a parameter whose gradient Backward
// accumulates into Grad. It returns t.
func (t *Tensor) SetRequiresGrad(v bool) *Tensor {
	if t.node != nil {
		panic("tensor: SetRequiresGrad on a non-leaf tensor")
	}
	t.requiresGrad = v
	return t
}

// IsLeaf reports whether t was created by the user rather than by a tracked op.
func (t *Tensor) IsLeaf() bool { return t.node == nil }

// Grad returns the accumulated gradient, or nil if none has been computed.
// The first Grad after ZeroGrad writes the zeros ZeroGrad deferred, so it
// must not run concurrently with other uses of t.
func (t *Tensor) Grad() *Tensor {
	t.settleGrad()
	return t.grad
}

// settleGrad writes the zeros a ZeroGrad deferred.
func (t *Tensor) settleGrad() {
	if t.gradZero {
		clear(t.grad.data)
		t.gradZero = false
	}
}

// SetGrad replaces the gradient storage. g must have t's shape; later
// backward passes accumulate into g in place (DDP uses this to make
// gradients views into its communication buckets). nil clears it.
func (t *Tensor) SetGrad(g *Tensor) {
	if g != nil && !sameShape(g.shape, t.shape) {
		panic(fmt.Sprintf("tensor: SetGrad: gradient shape %v does not match %v", g.shape, t.shape))
	}
	t.grad = g
	t.gradZero = false
}

// ZeroGrad sets the gradient to zero in place, keeping its storage. The
// zeros are written when the gradient is next read or added to; a product
// that overwrites the whole gradient in the next backward pass (a linear
// layer's weight gradient) writes it without them, which saves a pass
// over the storage and reading it back.
func (t *Tensor) ZeroGrad() {
	if t.grad != nil {
		t.gradZero = true
	}
}

// Recycle marks intermediate results whose storage a Backward may hand
// back to the buffer pool once every op that reads them has run its
// backward pass, which saves allocating, zeroing and page-faulting large
// fresh activations every training step; a recycled tensor is then empty
// (Len 0). The caller promises that each tensor owns its storage (not a
// view such as a Reshape) and that nothing but its recorded graph reads
// it: it is not returned or kept, and the ops that consumed it keep it no
// longer than their backward pass. Marking a tensor that is read after
// Backward, or, in separate calls, two tensors sharing storage, is a
// mistake that corrupts later results. Of the tensors of one call that
// share storage only the first is marked, so list them in the order they
// were computed (the owner, released last, first). A tensor without
// recorded history is left alone: no Backward releases it.
//
// nn.Sequential, nn's attention and nn/models' GPT mark their
// intermediates this way where they can prove the promise.
func Recycle(ts ...*Tensor) {
	var seen map[*float32]bool
	if len(ts) > 1 {
		seen = make(map[*float32]bool, len(ts))
	}
	for _, t := range ts {
		if len(t.data) == 0 {
			continue
		}
		if seen != nil {
			if seen[&t.data[0]] {
				continue
			}
			seen[&t.data[0]] = true
		}
		t.freeWithGraph()
	}
}

// freeWithGraph is Recycle for one tensor of this package's own, whose
// caller makes Recycle's promise.
func (t *Tensor) freeWithGraph() {
	if t.node != nil {
		t.recycle = true
	}
}

// Detach returns a tensor sharing t's data with no autograd history.
func (t *Tensor) Detach() *Tensor { return &Tensor{data: t.data, shape: t.shape} }

// Clone returns a deep copy of t's values with no autograd history.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{data: append([]float32(nil), t.data...), shape: append([]int(nil), t.shape...)}
}

// String formats small tensors fully and large ones by shape.
func (t *Tensor) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tensor%v", t.shape)
	if len(t.data) <= 16 {
		fmt.Fprintf(&b, "%v", t.data)
	}
	return b.String()
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
