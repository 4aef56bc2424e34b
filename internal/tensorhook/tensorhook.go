// Package tensorhook gives gotrain's own packages the tensor features that
// are not part of package tensor's public API, because their contract is
// too sharp to promise to every user. Package tensor installs the hooks
// when it is initialised, so any package that imports tensor may call
// them (the pattern of the standard library's internal/testlog).
package tensorhook

// FreeWithGraph, called with a *tensor.Tensor t, declares that t is an
// intermediate result that nothing but its recorded graph will read: the
// caller never hands t (or a tensor sharing its data) to anyone, and the
// ops that consumed it do not keep it beyond their backward pass. When a
// Backward releases t's history, after every op that reads t has run its
// backward, t's storage is recycled for the results of later ops, which
// saves allocating, zeroing and page-faulting large fresh activations
// every training step; t is then empty (Len 0). It has no effect on a
// tensor without recorded history, which no Backward releases.
//
// nn.Sequential marks the outputs between its built-in layers this way,
// where it can prove the promise (see its Forward). Any other argument
// type panics.
var FreeWithGraph func(t any)

// PoolStats reports the bytes package tensor's buffer pool holds for
// reuse and the cumulative bytes of poolable buffers it had to allocate
// because none of the size was free. A training loop in its steady state
// allocates no fresh bytes per step: tests compare fresh across steps to
// find results taken from the pool and never handed back.
var PoolStats func() (held, fresh int64)

// ReleasePool empties package tensor's buffer pool, leaving its buffers
// to the garbage collector. A training loop calls it before work that
// needs buffers of other sizes (an evaluation pass on smaller chunks), so
// that the memory serves that work rather than sitting idle beside it;
// the next training step refills the pool.
var ReleasePool func()
