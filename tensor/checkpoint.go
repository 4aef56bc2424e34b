package tensor

import (
	"fmt"
)

// Checkpoint computes f(x) without keeping what f's backward needs, and
// records one op whose backward runs f again on x and differentiates
// that (PyTorch's torch.utils.checkpoint): the memory of f's activations
// is held only while its backward runs, at the cost of a second forward
// pass. The leaves f uses that require grad (its module's parameters) are
// found by running f and become inputs of the op, so that their gradient
// hooks fire once the op's backward has added into them, as without
// checkpointing.
//
// f must compute the same thing both times: the same ops on the same
// leaves, drawing the same random numbers (nn.CallCheckpointed replays
// dropout's generators); it is recomputed in the Autocast precision of
// the first run. Then the values and gradients are bitwise those
// of f(x) itself. Checkpoint panics, naming the leaf, if the second run
// uses a leaf the first did not. With recording off, or when neither x
// nor any leaf of f requires grad, it is f(x).
func Checkpoint(f func(*Tensor) *Tensor, x *Tensor) *Tensor {
	if !GradEnabled() {
		return f(x)
	}
	// The first run records f's graph from a detached copy of x, to find
	// f's leaves and to compute exactly what the recomputation will; the
	// graph is released at once, its recycled buffers back to the pool.
	xd := &Tensor{data: x.data, shape: x.shape, requiresGrad: x.requiresGrad || x.released}
	y := f(xd)
	if y == nil {
		panic("tensor: Checkpoint: the function returned nil")
	}
	order, pending, err := topo(y)
	if err != nil {
		panic(fmt.Sprintf("tensor: Checkpoint: %v", err))
	}
	inputs := []*Tensor{x}
	leaves := make(map[*Tensor]bool, len(pending))
	for leaf := range pending {
		if leaf != xd {
			leaves[leaf] = true
		}
	}
	// Inputs in the order f first used them (reverse of the topological
	// order's leaves), so that gradient hooks fire in a stable order.
	for _, n := range order {
		for _, in := range n.node.inputs {
			if leaves[in] {
				inputs = append(inputs, in)
				delete(leaves, in)
			}
		}
	}
	for leaf := range leaves { // a leaf root (f returned a parameter)
		inputs = append(inputs, leaf)
	}
	if y.node == nil && y != xd && !y.requiresGrad {
		return y // a constant of x: nothing to differentiate
	}
	out := &Tensor{data: y.data, shape: append([]int(nil), y.shape...)}
	releaseGraph(order, y)
	used := make(map[*Tensor]bool, len(inputs))
	for _, in := range inputs[1:] {
		used[in] = true
	}
	// Backward usually runs outside the Autocast of the forward pass:
	// the recomputation runs in the precision the first run did.
	prec := AutocastPrecision()
	return record(out, "checkpoint", func(g []float32) {
		prev := Precision(autocast.Swap(int32(prec)))
		defer autocast.Store(int32(prev))
		recompute(f, x, used, g)
	}, inputs...)
}

// releaseGraph frees the recorded history of order, a graph computed
// only to be thrown away, handing recycled storage back to the pool
// except root's, which the checkpoint's output keeps.
func releaseGraph(order []*Tensor, root *Tensor) {
	var keep *float32
	if len(root.data) > 0 {
		keep = &root.data[0]
	}
	for _, n := range order {
		n.node = nil
		n.preHooks = nil
		n.requiresGrad = false
		n.released = true
		if n.recycle {
			if len(n.data) > 0 && &n.data[0] != keep {
				putBuf(n.data)
			}
			n.data = nil
			n.recycle = false
		}
	}
	root.released = false
}

// recompute is Checkpoint's backward: it runs f again on x with
// recording on and adds the gradients for g, its output's gradient, into
// x's gradient and the leaves'. The leaves' gradient hooks are left to
// the enclosing Backward, which fires them once this op is done.
func recompute(f func(*Tensor) *Tensor, x *Tensor, used map[*Tensor]bool, g []float32) {
	xd := &Tensor{data: x.data, shape: x.shape, requiresGrad: x.requiresGrad}
	prev := SetGradEnabled(true)
	y := f(xd)
	SetGradEnabled(prev)
	order, pending, err := topo(y)
	if err != nil {
		panic(fmt.Sprintf("tensor: Checkpoint: recomputing: %v", err))
	}
	for leaf := range pending {
		if leaf != xd && !used[leaf] {
			panic(fmt.Sprintf("tensor: Checkpoint: the recomputation used a tensor of shape %v that requires grad and the first run did not: the checkpointed function must do the same both times", leaf.shape))
		}
	}
	if x.requiresGrad {
		// x's gradient buffer in the enclosing pass receives what reaches
		// xd directly.
		xd.grad = &Tensor{data: x.accGrad(), shape: x.shape}
	}
	if !y.requiresGrad {
		return
	}
	addTo(y.accGrad(), g)
	pass := &Pass{leaves: make(map[*Tensor]bool, len(pending))}
	for leaf := range pending {
		pass.leaves[leaf] = true
	}
	for i := len(order) - 1; i >= 0; i-- {
		n := order[i]
		if gn := n.passGrad; gn != nil {
			n.firePreHooks(pass)
			n.node.backward(gn)
			if n.passGrad != nil {
				putBuf(n.passGrad)
			}
		}
		n.passGrad = nil
		n.releaseGraph()
	}
	if err := pass.runFinishes(); err != nil {
		panic(fmt.Sprintf("tensor: Checkpoint: a hook inside the checkpointed function failed: %v", err))
	}
}
