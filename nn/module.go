package nn

import (
	"fmt"
	"strings"

	"github.com/gotrain/gotrain/tensor"
)

// Module is a layer or a model: something with a Forward pass and,
// through its embedded Base, named parameters, buffers and child modules.
//
// Implement Module by embedding Base in a struct and writing Forward:
//
//	type Net struct {
//		nn.Base
//		fc1, fc2 *nn.LinearLayer
//	}
//
//	func NewNet() *Net {
//		n := &Net{fc1: nn.Linear(784, 128), fc2: nn.Linear(128, 10)}
//		n.Register("fc1", n.fc1) // state dict names "fc1.weight", "fc1.bias"
//		n.Register("fc2", n.fc2)
//		return n
//	}
//
//	func (n *Net) Forward(x *tensor.Tensor) *tensor.Tensor {
//		return n.fc2.Forward(tensor.ReLU(n.fc1.Forward(x)))
//	}
//
// Forward panics (message starting with "nn:") when the input's shape does
// not fit the layer: that is a mistake in the program, not in its
// environment.
type Module interface {
	// Forward computes the module's output for input x.
	Forward(x *tensor.Tensor) *tensor.Tensor
	// base returns the registration record; it is provided by embedding
	// Base, which is the only way to implement Module.
	base() *Base
}

// Dtype is the element type a state-dict entry has in PyTorch. All gotrain
// tensors hold float32; entries whose PyTorch type differs (BatchNorm's
// num_batches_tracked, an int64 counter) hold their value as a float32 and
// are marked so that writers of checkpoint files convert them on the way
// out, and readers convert them back on the way in.
type Dtype uint8

const (
	// Float32 is the default: parameters and most buffers.
	Float32 Dtype = iota
	// Int64 marks an integer counter stored in a float32 tensor. Values
	// are exact up to 2^24.
	Int64
)

// String returns PyTorch's name for the type ("float32", "int64").
func (d Dtype) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int64:
		return "int64"
	}
	return fmt.Sprintf("Dtype(%d)", uint8(d))
}

// Named is a tensor with its dotted PyTorch name, such as "0.weight",
// "fc1.bias" or "bn.num_batches_tracked".
type Named struct {
	Name   string
	Tensor *tensor.Tensor
	// Dtype is the entry's PyTorch element type; the zero value is Float32.
	// See Dtype for how Int64 entries are stored.
	Dtype Dtype
}

// Base holds what a module registers: its own parameters and buffers in
// registration order, its named children, and its train/eval mode. Embed it
// (by value) in every module; the zero value is an empty module in training
// mode, like a freshly built PyTorch module.
type Base struct {
	params   []Named
	buffers  []Named
	children []namedModule
	// eval is inverted so that the zero value means training mode.
	eval bool
	// hooks run around Forward when the module is run through Call; nil
	// when none is registered.
	hooks *forwardHooks
}

type namedModule struct {
	name string
	m    Module
}

func (b *Base) base() *Base { return b }

// RegisterParameter adds t as a trainable parameter called name (no dots),
// marks it as requiring gradients, and returns it. Names must be unique
// among the module's parameters, buffers and children.
func (b *Base) RegisterParameter(name string, t *tensor.Tensor) *tensor.Tensor {
	b.checkNew(name, t)
	t.SetRequiresGrad(true)
	b.params = append(b.params, Named{Name: name, Tensor: t})
	return t
}

// RegisterBuffer adds t as a non-trainable state tensor (like BatchNorm's
// running mean) that is saved in the state dict, and returns it. dtype is
// the type PyTorch gives the buffer (Float32 for almost all).
func (b *Base) RegisterBuffer(name string, t *tensor.Tensor, dtype Dtype) *tensor.Tensor {
	b.checkNew(name, t)
	b.buffers = append(b.buffers, Named{Name: name, Tensor: t, Dtype: dtype})
	return t
}

// Register adds m as a child module called name; its parameters then appear
// as "name.weight" and so on. Children are visited in registration order.
func (b *Base) Register(name string, m Module) {
	if m == nil {
		panic(fmt.Sprintf("nn: Register %q: nil module", name))
	}
	b.checkName(name)
	if m.base() == b {
		panic(fmt.Sprintf("nn: Register %q: a module cannot be its own child", name))
	}
	b.children = append(b.children, namedModule{name: name, m: m})
}

// Training reports whether the module is in training mode (the default);
// SetTrain switches a whole model.
func (b *Base) Training() bool { return !b.eval }

func (b *Base) checkNew(name string, t *tensor.Tensor) {
	if t == nil {
		panic(fmt.Sprintf("nn: register %q: nil tensor", name))
	}
	b.checkName(name)
}

// checkName panics on names PyTorch would reject: empty, dotted, or taken.
func (b *Base) checkName(name string) {
	if name == "" || strings.Contains(name, ".") {
		panic(fmt.Sprintf("nn: invalid module attribute name %q (must be non-empty, without '.')", name))
	}
	for _, p := range b.params {
		if p.Name == name {
			panic(fmt.Sprintf("nn: %q is already registered as a parameter", name))
		}
	}
	for _, p := range b.buffers {
		if p.Name == name {
			panic(fmt.Sprintf("nn: %q is already registered as a buffer", name))
		}
	}
	for _, c := range b.children {
		if c.name == name {
			panic(fmt.Sprintf("nn: %q is already registered as a child module", name))
		}
	}
}

// NamedModule is a module with its dotted path from the root ("" for the
// root itself, "0", "encoder.fc1", ...).
type NamedModule struct {
	Name   string
	Module Module
}

// NamedModules returns m and every module below it in pre-order (a module
// before its children, children in registration order). A module reachable
// by several paths is listed once, under the first, as in PyTorch.
func NamedModules(m Module) []NamedModule {
	var out []NamedModule
	seen := make(map[*Base]bool)
	var walk func(prefix string, m Module)
	walk = func(prefix string, m Module) {
		b := m.base()
		if seen[b] {
			return
		}
		seen[b] = true
		out = append(out, NamedModule{Name: prefix, Module: m})
		for _, c := range b.children {
			walk(join(prefix, c.name), c.m)
		}
	}
	walk("", m)
	return out
}

// NamedParameters returns every parameter of m and its descendants with
// PyTorch's names, in PyTorch's order: each module's own parameters in
// registration order, modules in pre-order. A tensor shared by several
// modules is listed once, under its first name.
func NamedParameters(m Module) []Named {
	return collect(m, func(b *Base) []Named { return b.params })
}

// Parameters returns the tensors of NamedParameters, in the same order.
// Optimizers and DDP take this list; its order is the registration order
// that DDP's bucketing reverses.
func Parameters(m Module) []*tensor.Tensor {
	named := NamedParameters(m)
	out := make([]*tensor.Tensor, len(named))
	for i, n := range named {
		out[i] = n.Tensor
	}
	return out
}

// NamedBuffers returns every buffer of m and its descendants with PyTorch's
// names ("1.running_mean", "bn.num_batches_tracked"), ordered like
// NamedParameters.
func NamedBuffers(m Module) []Named {
	return collect(m, func(b *Base) []Named { return b.buffers })
}

func collect(m Module, own func(*Base) []Named) []Named {
	var out []Named
	seen := make(map[*tensor.Tensor]bool)
	for _, nm := range NamedModules(m) {
		for _, e := range own(nm.Module.base()) {
			if seen[e.Tensor] {
				continue
			}
			seen[e.Tensor] = true
			e.Name = join(nm.Name, e.Name)
			out = append(out, e)
		}
	}
	return out
}

// SetTrain puts m and all its descendants in training mode (training true)
// or evaluation mode (false), like PyTorch's model.train() and
// model.eval(). It changes Dropout (identity in eval) and BatchNorm (running
// statistics used and left unchanged in eval).
func SetTrain(m Module, training bool) {
	for _, nm := range NamedModules(m) {
		nm.Module.base().eval = !training
	}
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}
