package tensor

// AddBackwardPreHook registers h on a non-leaf tensor that requires grad
// and returns a function that removes it. During a backward pass that
// reaches t with a gradient, h runs once, the moment t's gradient is
// complete (every op that read t has run its backward) and before the op
// that produced t runs its own: what PyTorch's FSDP registers on a
// module's outputs to gather the module's parameters for its backward.
// The hooks go with t's recorded history, which Backward releases.
func (t *Tensor) AddBackwardPreHook(h GradHook) (remove func()) {
	if t.node == nil {
		panic("tensor: AddBackwardPreHook on a tensor without recorded history (a leaf or a result computed without grad)")
	}
	id := int(hookIDs.Add(1))
	t.preHooks = append(t.preHooks, hookEntry{id: id, fn: h})
	return func() {
		for i, e := range t.preHooks {
			if e.id == id {
				t.preHooks = append(t.preHooks[:i:i], t.preHooks[i+1:]...)
				return
			}
		}
	}
}

func (t *Tensor) firePreHooks(pass *Pass) {
	for _, h := range t.preHooks {
		h.fn(pass, t)
	}
}
