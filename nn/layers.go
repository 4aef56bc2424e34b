package nn

import (
	"fmt"
	"strconv"

	"github.com/gotrain/gotrain/tensor"
)

// ReLULayer applies max(0, x) elementwise, PyTorch's nn.ReLU.
type ReLULayer struct{ Base }

// ReLU returns a ReLU activation layer.
func ReLU() *ReLULayer { return &ReLULayer{} }

// Forward returns max(0, x).
func (*ReLULayer) Forward(x *tensor.Tensor) *tensor.Tensor { return tensor.ReLU(x) }

// String returns "ReLU()".
func (*ReLULayer) String() string { return "ReLU()" }

// GELULayer applies GELU elementwise, PyTorch's nn.GELU: the exact (erf)
// form, or the tanh approximation when Tanh is set.
type GELULayer struct {
	Base
	Tanh bool // approximate='tanh'
}

// GELU returns an exact GELU activation layer.
func GELU() *GELULayer { return &GELULayer{} }

// GELUTanh returns a GELU layer with the tanh approximation,
// nn.GELU(approximate='tanh').
func GELUTanh() *GELULayer { return &GELULayer{Tanh: true} }

// Forward returns x·Φ(x) (or its tanh approximation).
func (g *GELULayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	if g.Tanh {
		return tensor.GELUTanh(x)
	}
	return tensor.GELU(x)
}

// String returns "GELU(approximate='none')" or "GELU(approximate='tanh')".
func (g *GELULayer) String() string {
	if g.Tanh {
		return "GELU(approximate='tanh')"
	}
	return "GELU(approximate='none')"
}

// SoftmaxLayer is Softmax or LogSoftmax along one dimension.
type SoftmaxLayer struct {
	Base
	Dim int  // negative counts from the end
	Log bool // LogSoftmax
}

// Softmax returns a layer computing softmax along dim, PyTorch's
// nn.Softmax(dim).
func Softmax(dim int) *SoftmaxLayer { return &SoftmaxLayer{Dim: dim} }

// LogSoftmax returns a layer computing log-softmax along dim, PyTorch's
// nn.LogSoftmax(dim).
func LogSoftmax(dim int) *SoftmaxLayer { return &SoftmaxLayer{Dim: dim, Log: true} }

// Forward applies the (log-)softmax along Dim.
func (s *SoftmaxLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	if d := s.Dim; d >= x.Dim() || d < -x.Dim() {
		panic(fmt.Sprintf("nn: %s: dim %d out of range for input %v", s, s.Dim, x.Shape()))
	}
	if s.Log {
		return tensor.LogSoftmax(x, s.Dim)
	}
	return tensor.Softmax(x, s.Dim)
}

// String returns "Softmax(dim=…)" or "LogSoftmax(dim=…)".
func (s *SoftmaxLayer) String() string {
	if s.Log {
		return fmt.Sprintf("LogSoftmax(dim=%d)", s.Dim)
	}
	return fmt.Sprintf("Softmax(dim=%d)", s.Dim)
}

// FlattenLayer merges dimensions StartDim..end into one, PyTorch's
// nn.Flatten. It shares the input's data.
type FlattenLayer struct {
	Base
	StartDim int
}

// Flatten returns a layer flattening every dimension after the batch
// dimension: [N, C, H, W] becomes [N, C·H·W].
func Flatten() *FlattenLayer { return &FlattenLayer{StartDim: 1} }

// FlattenFrom returns a layer flattening dimensions start..end.
func FlattenFrom(start int) *FlattenLayer { return &FlattenLayer{StartDim: start} }

// Forward reshapes x to x.Shape()[:StartDim] + [product of the rest],
// sharing x's data.
func (f *FlattenLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	return tensor.Flatten(x, f.StartDim)
}

// String returns "Flatten(start_dim=…, end_dim=-1)".
func (f *FlattenLayer) String() string {
	return fmt.Sprintf("Flatten(start_dim=%d, end_dim=-1)", f.StartDim)
}

// SequentialLayer runs its children in order, each one's output the next
// one's input, PyTorch's nn.Sequential. Children are named "0", "1", …, so
// parameters are named "0.weight", "2.bias" and so on.
type SequentialLayer struct {
	Base
	layers []Module
}

// Sequential returns a container running mods in order.
func Sequential(mods ...Module) *SequentialLayer {
	s := &SequentialLayer{}
	for _, m := range mods {
		s.Append(m)
	}
	return s
}

// Append adds m as the next child, named by its index.
func (s *SequentialLayer) Append(m Module) {
	s.Register(strconv.Itoa(len(s.layers)), m)
	s.layers = append(s.layers, m)
}

// Len returns the number of children.
func (s *SequentialLayer) Len() int { return len(s.layers) }

// At returns child i.
func (s *SequentialLayer) At(i int) Module { return s.layers[i] }

// String describes the container and its children like PyTorch's
// print(model); see Repr.
func (s *SequentialLayer) String() string {
	if len(s.layers) == 0 {
		return "Sequential()"
	}
	return Repr(s)
}

// Forward runs the children in order; an empty Sequential returns x.
//
// The outputs between children are not visible to the caller, so some runs
// of children are computed as one fused op with the same values and
// gradients: Conv2d followed by ReLU (tensor.Conv2d with tensor.PostReLU),
// and that followed by a 2×2 MaxPool2d at stride 2 without padding (with
// tensor.PostMaxPool2x2 too).
//
// The outputs between children are also handed back to package tensor's
// buffer pool once Backward is done with them, when only built-in layers
// read them, so that the next training step reuses their storage.
func (s *SequentialLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	if len(s.layers) == 0 {
		return x
	}
	// outs[k] is the output of a run of children; next[k] the index of
	// the child that reads it (len(s.layers) for the result); direct[k]
	// whether it is the result of one op, not a view made inside a layer.
	outs := make([]*tensor.Tensor, 0, len(s.layers)+1)
	next := make([]int, 0, len(s.layers)+1)
	direct := make([]bool, 0, len(s.layers)+1)
	outs, next, direct = append(outs, x), append(next, 0), append(direct, false)
	for i := 0; i < len(s.layers); {
		y, used := s.fused(i, x)
		d := used > 0
		if used == 0 {
			d = directOutput(s.layers[i], x)
			y, used = Call(s.layers[i], x), 1
		}
		i += used
		x = y
		outs, next, direct = append(outs, y), append(next, i), append(direct, d)
	}
	s.freeIntermediates(outs, next, direct)
	return x
}

// freeIntermediates marks outputs between children for recycling
// (tensor.Recycle, whose promise this upholds) when
// that is safe: outputs sharing storage are grouped, and a group is freed
// (through its first member, which a Backward releases last) only if it
// does not hold the input or the result, every member is read only by a
// built-in layer that keeps nothing beyond its backward pass, and the
// first member is an op's own result (a view made inside a layer, such as
// the reshape of an unbatched input, would be released before the op's
// result it shares storage with).
func (s *SequentialLayer) freeIntermediates(outs []*tensor.Tensor, next []int, direct []bool) {
	if len(outs) < 3 {
		return
	}
	type group struct {
		first *tensor.Tensor
		ok    bool
	}
	groups := make(map[*float32]*group, len(outs))
	for k, t := range outs {
		d := t.Data()
		if len(d) == 0 {
			continue
		}
		p := &d[0]
		gr := groups[p]
		if gr == nil {
			gr = &group{first: t, ok: direct[k]}
			groups[p] = gr
		}
		if k == 0 || next[k] >= len(s.layers) || !graphOnly(s.layers[next[k]]) {
			gr.ok = false
		}
	}
	for _, gr := range groups {
		if gr.ok {
			tensor.Recycle(gr.first)
		}
	}
}

// directOutput reports whether m's output for input x is the result of a
// single op on new storage, not a view.
func directOutput(m Module, x *tensor.Tensor) bool {
	switch m := m.(type) {
	case *LinearLayer, *ReLULayer:
		return true
	case *DropoutLayer:
		return m.Training() && m.P > 0
	case *Conv2dLayer, *Pool2dLayer:
		return x.Dim() == 4
	}
	return false
}

// graphOnly reports whether m is a built-in layer that reads its input
// only in its forward and backward passes and whose output is either new
// storage or a view of its input.
func graphOnly(m Module) bool {
	switch m.(type) {
	case *Conv2dLayer, *LinearLayer, *ReLULayer, *Pool2dLayer, *DropoutLayer, *FlattenLayer:
		return true
	}
	return false
}

// fused runs the children from i as one fused op if they form a pattern
// Forward fuses, returning the result and the number of children used (0
// if none).
func (s *SequentialLayer) fused(i int, x *tensor.Tensor) (*tensor.Tensor, int) {
	c, ok := s.layers[i].(*Conv2dLayer)
	if !ok || i+1 >= len(s.layers) || x.Dim() != 4 {
		return nil, 0
	}
	if _, ok := s.layers[i+1].(*ReLULayer); !ok || HasForwardHooks(c) || HasForwardHooks(s.layers[i+1]) {
		return nil, 0
	}
	c.check(x.Shape())
	if i+2 < len(s.layers) {
		if p, ok := s.layers[i+2].(*Pool2dLayer); ok && !HasForwardHooks(p) && p.Max && p.Kernel == 2 &&
			p.Stride == [2]int{2, 2} && p.Padding == [2]int{} {
			if oh, ow := c.outSize(x.Shape()); oh >= 2 && ow >= 2 {
				return tensor.Conv2dWith(x, c.Weight, c.Bias, c.options(), tensor.PostReLU, tensor.PostMaxPool2x2), 3
			}
		}
	}
	return tensor.Conv2dWith(x, c.Weight, c.Bias, c.options(), tensor.PostReLU), 2
}
