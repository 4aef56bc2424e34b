package nn

import "github.com/gotrain/gotrain/tensor"

// ForwardPreHook runs before a module's Forward, with its input.
type ForwardPreHook func(m Module, x *tensor.Tensor)

// ForwardHook runs after a module's Forward, with its input and output.
type ForwardHook func(m Module, x, y *tensor.Tensor)

// forwardHooks are the hooks registered on one module, in registration
// order.
type forwardHooks struct {
	nextID int
	pre    []preEntry
	post   []postEntry
}

type preEntry struct {
	id int
	fn ForwardPreHook
}

type postEntry struct {
	id int
	fn ForwardHook
}

// Call runs m.Forward(x) between the hooks registered on m, as PyTorch's
// module __call__ does: the pre-hooks, then Forward, then the forward
// hooks, each kind in registration order. A module without hooks costs
// one nil check. Modules call their children through Call so that
// wrappers such as FSDP can act around each child's Forward.
func Call(m Module, x *tensor.Tensor) *tensor.Tensor {
	h := m.base().hooks
	if h == nil {
		return m.Forward(x)
	}
	// Copies: a hook may remove itself or register another.
	for _, e := range append([]preEntry(nil), h.pre...) {
		e.fn(m, x)
	}
	y := m.Forward(x)
	for _, e := range append([]postEntry(nil), h.post...) {
		e.fn(m, x, y)
	}
	return y
}

// HasForwardHooks reports whether any hook is registered on m: layers
// that fuse their children into one op do not fuse a child with hooks.
func HasForwardHooks(m Module) bool {
	h := m.base().hooks
	return h != nil && (len(h.pre) > 0 || len(h.post) > 0)
}

// RegisterForwardPreHook makes Call(m, x) run f before m.Forward and
// returns a function that removes it.
func RegisterForwardPreHook(m Module, f ForwardPreHook) (remove func()) {
	b := m.base()
	h := b.hookSet()
	h.nextID++
	id := h.nextID
	h.pre = append(h.pre, preEntry{id: id, fn: f})
	return func() {
		for i, e := range h.pre {
			if e.id == id {
				h.pre = append(h.pre[:i:i], h.pre[i+1:]...)
				break
			}
		}
		b.dropEmptyHooks()
	}
}

// RegisterForwardHook makes Call(m, x) run f after m.Forward, with its
// output, and returns a function that removes it.
func RegisterForwardHook(m Module, f ForwardHook) (remove func()) {
	b := m.base()
	h := b.hookSet()
	h.nextID++
	id := h.nextID
	h.post = append(h.post, postEntry{id: id, fn: f})
	return func() {
		for i, e := range h.post {
			if e.id == id {
				h.post = append(h.post[:i:i], h.post[i+1:]...)
				break
			}
		}
		b.dropEmptyHooks()
	}
}

func (b *Base) hookSet() *forwardHooks {
	if b.hooks == nil {
		b.hooks = &forwardHooks{}
	}
	return b.hooks
}

// dropEmptyHooks returns a module whose hooks are all removed to the
// nil-check path of Call.
func (b *Base) dropEmptyHooks() {
	if h := b.hooks; h != nil && len(h.pre) == 0 && len(h.post) == 0 {
		b.hooks = nil
	}
}
