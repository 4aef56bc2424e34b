package tensor

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// gradDisabled is process-wide like PyTorch's default-thread grad mode:
// training loops run on one goroutine.
var gradDisabled atomic.Bool

// GradEnabled reports whether ops currently record autograd history.
func GradEnabled() bool { return !gradDisabled.Load() }

// SetGradEnabled turns recording on or off and returns the previous setting.
func SetGradEnabled(on bool) (prev bool) { return !gradDisabled.Swap(!on) }

// NoGrad runs f with autograd recording off (like torch.no_grad()).
func NoGrad(f func()) {
	prev := SetGradEnabled(false)
	defer SetGradEnabled(prev)
	f()
}

// node is one recorded op: its inputs and a closure that, given the output's
// gradient, accumulates into the inputs' gradient buffers (see accGrad).
type node struct {
	op       string
	inputs   []*Tensor
	backward func(grad []float32)
}

// record makes out the result of op on inputs if any input requires grad and
// recording is on. backward receives out's gradient and must add each
// input's contribution into in.accGrad() for inputs with in.needsGrad().
func record(out *Tensor, op string, backward func(grad []float32), inputs ...*Tensor) *Tensor {
	if !GradEnabled() {
		return out
	}
	for _, in := range inputs {
		// A released input keeps the edge so that Backward can report it
		// instead of silently treating it as a constant.
		if in != nil && (in.requiresGrad || in.released) {
			out.requiresGrad = true
			out.node = &node{op: op, inputs: inputs, backward: backward}
			return out
		}
	}
	return out
}

// needsGrad reports whether t takes part in the current backward pass.
func (t *Tensor) needsGrad() bool { return t != nil && t.requiresGrad }

// accGrad returns the buffer gradients of t are accumulated into during the
// current backward pass: the leaf's Grad (allocated zeroed on first use) or
// the non-leaf's pass-local buffer.
func (t *Tensor) accGrad() []float32 {
	if t.node == nil {
		if t.grad == nil {
			t.grad = Zeros(t.shape...)
		}
		t.settleGrad()
		return t.grad.data
	}
	if t.passGrad == nil {
		// Pass-local buffers are recycled: a training step needs the same
		// sizes every time, and large fresh allocations cost page faults
		// and zeroing.
		t.passGrad = getBuf(len(t.data))
		clear(t.passGrad)
	}
	return t.passGrad
}

// gradDst is accGrad for an op that can write its whole contribution in
// one pass: it returns the buffer and whether it is fresh, holding no
// gradient yet: a pass-local buffer no op has added to, or a leaf's
// gradient that ZeroGrad zeroed and nothing has touched since. A fresh
// buffer is not cleared (its contents are unspecified) and the caller must
// overwrite every element, which saves clearing it and reading the zeros
// back.
func (t *Tensor) gradDst() (buf []float32, fresh bool) {
	if t.node != nil && t.passGrad == nil {
		t.passGrad = getBuf(len(t.data))
		return t.passGrad, true
	}
	if t.node == nil && t.gradZero {
		t.gradZero = false
		return t.grad.data, true
	}
	return t.accGrad(), false
}

// GradHook is called during a backward pass the moment p's gradient is
// final: every op that used p has added its contribution. Hooks fire in the
// reverse order in which parameters were used by the forward pass, before
// Backward returns.
type GradHook func(pass *Pass, p *Tensor)

type hookEntry struct {
	id int
	fn GradHook
}

var hookIDs atomic.Int64

// AddGradHook registers h on a leaf tensor that requires grad and returns a
// function that removes it.
func (t *Tensor) AddGradHook(h GradHook) (remove func()) {
	if t.node != nil {
		panic("tensor: AddGradHook on a non-leaf tensor")
	}
	id := int(hookIDs.Add(1))
	t.hooks = append(t.hooks, hookEntry{id: id, fn: h})
	return func() {
		for i, e := range t.hooks {
			if e.id == id {
				t.hooks = append(t.hooks[:i:i], t.hooks[i+1:]...)
				return
			}
		}
	}
}

// Pass is one run of Backward. Hooks use it to learn which leaves the graph
// reaches and to queue work that must finish before Backward returns (like
// PyTorch's queue_callback, which DDP uses to wait for its allreduces).
type Pass struct {
	leaves   map[*Tensor]bool
	finishes []func() error
}

// Reaches reports whether the graph being differentiated uses leaf t.
func (p *Pass) Reaches(t *Tensor) bool { return p.leaves[t] }

// OnFinish queues f to run after all gradients are computed, in the order
// queued. Backward returns the errors of all finish functions, joined.
func (p *Pass) OnFinish(f func() error) { p.finishes = append(p.finishes, f) }

// ErrNotScalar is returned by Backward on a tensor with more than one element.
var ErrNotScalar = errors.New("tensor: Backward needs a one-element tensor")

// ErrGraphReleased is returned by Backward when the graph leads through a
// result whose history an earlier Backward already freed (PyTorch: "Trying
// to backward through the graph a second time").
var ErrGraphReleased = errors.New("tensor: Backward through a graph already released by an earlier Backward")

// Backward computes the gradient of t (a one-element tensor) with respect to
// every leaf that requires grad, adding it into their Grad. Gradient hooks
// fire as gradients become final; finish functions queued by hooks run last
// and their errors are returned. The recorded graph is released afterwards.
func (t *Tensor) Backward() error {
	if len(t.data) != 1 {
		return fmt.Errorf("%w (shape %v)", ErrNotScalar, t.shape)
	}
	return t.BackwardWith(Full(1, t.shape...))
}

// BackwardWith is Backward with an explicit output gradient of t's shape.
func (t *Tensor) BackwardWith(grad *Tensor) error {
	if !sameShape(grad.shape, t.shape) {
		return fmt.Errorf("tensor: BackwardWith: gradient shape %v does not match output %v", grad.shape, t.shape)
	}
	if t.released {
		return ErrGraphReleased
	}
	if !t.requiresGrad {
		return errors.New("tensor: Backward on a tensor that does not require grad")
	}
	order, pending, err := topo(t)
	if err != nil {
		return err
	}
	pass := &Pass{leaves: make(map[*Tensor]bool, len(pending))}
	for leaf := range pending {
		pass.leaves[leaf] = true
	}
	// A leaf root accumulates like any leaf.
	addTo(t.accGrad(), grad.data)
	if t.node == nil { // t is itself a leaf
		t.fireHooks(pass)
	}
	for i := len(order) - 1; i >= 0; i-- {
		n := order[i]
		if g := n.passGrad; g != nil {
			n.firePreHooks(pass)
			n.node.backward(g)
			// An op may have handed the buffer on to its input (Reshape).
			if n.passGrad != nil {
				putBuf(n.passGrad)
			}
		}
		n.passGrad = nil
		for _, in := range n.node.inputs {
			if in == nil || !in.requiresGrad || in.node != nil {
				continue
			}
			pending[in]--
			if pending[in] == 0 {
				in.fireHooks(pass)
			}
		}
		// Release the graph as we go so activations can be collected.
		n.releaseGraph()
	}
	return pass.runFinishes()
}

// releaseGraph drops n's place in the graph once its backward has run;
// a recycled buffer goes back to the pool, since every op that reads n
// comes later in the order and has run.
func (n *Tensor) releaseGraph() {
	n.node = nil
	n.preHooks = nil
	n.requiresGrad = false
	n.released = true
	if n.recycle {
		putBuf(n.data)
		n.data = nil
		n.recycle = false
	}
}

// runFinishes runs the pass's finish callbacks and joins their errors.
func (p *Pass) runFinishes() error {
	var errs []error
	for _, f := range p.finishes {
		if err := f(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *Tensor) fireHooks(pass *Pass) {
	for _, h := range t.hooks {
		h.fn(pass, t)
	}
}

// topo returns the non-leaf tensors reachable from root in topological order
// (inputs before outputs) and, for each leaf requiring grad, how many graph
// edges lead to it. It fails if the graph reaches released history.
func topo(root *Tensor) (order []*Tensor, pending map[*Tensor]int, err error) {
	pending = make(map[*Tensor]int)
	seen := make(map[*Tensor]bool)
	type frame struct {
		t    *Tensor
		next int
	}
	if root.node == nil {
		pending[root] = 0
		return nil, pending, nil
	}
	stack := []frame{{t: root}}
	seen[root] = true
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if f.next < len(f.t.node.inputs) {
			in := f.t.node.inputs[f.next]
			f.next++
			if in != nil && in.released {
				return nil, nil, fmt.Errorf("%w (input %d of %s, shape %v)", ErrGraphReleased, f.next-1, f.t.node.op, in.shape)
			}
			if in == nil || !in.requiresGrad {
				continue
			}
			if in.node == nil {
				pending[in]++
				continue
			}
			if !seen[in] {
				seen[in] = true
				stack = append(stack, frame{t: in})
			}
			continue
		}
		order = append(order, f.t)
		stack = stack[:len(stack)-1]
	}
	return order, pending, nil
}
