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
