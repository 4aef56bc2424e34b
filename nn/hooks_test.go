package nn

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// logged records its Forward in a shared log.
type logged struct {
	Base
	log *[]string
}

func (l *logged) Forward(x *tensor.Tensor) *tensor.Tensor {
	*l.log = append(*l.log, "forward")
	return tensor.MulScalar(x, 2)
}

// TestCallRunsHooksInOrder: pre-hooks in registration order with the
// input, then Forward, then forward hooks in registration order with the
// input and the output Call returns.
func TestCallRunsHooksInOrder(t *testing.T) {
	var log []string
	m := &logged{log: &log}
	x := tensor.New([]float32{1, 2}, 2)
	for _, name := range []string{"pre1", "pre2"} {
		RegisterForwardPreHook(m, func(mod Module, in *tensor.Tensor) {
			if mod != Module(m) || in != x {
				t.Errorf("%s: got module %p input %p", name, mod, in)
			}
			log = append(log, name)
		})
	}
	var seen *tensor.Tensor
	for _, name := range []string{"post1", "post2"} {
		RegisterForwardHook(m, func(mod Module, in, y *tensor.Tensor) {
			if mod != Module(m) || in != x {
				t.Errorf("%s: got module %p input %p", name, mod, in)
			}
			seen = y
			log = append(log, name)
		})
	}
	y := Call(m, x)
	if want := []string{"pre1", "pre2", "forward", "post1", "post2"}; !slices.Equal(log, want) {
		t.Fatalf("ran %v, want %v", log, want)
	}
	if seen != y || fmt.Sprint(y.Data()) != "[2 4]" {
		t.Fatalf("forward hook saw %p, Call returned %p = %v", seen, y, y.Data())
	}
}

// TestCallHookRemoval: removed hooks do not run; removing one twice is
// harmless; with every hook removed the module is back to the plain path.
func TestCallHookRemoval(t *testing.T) {
	var log []string
	m := &logged{log: &log}
	rmA := RegisterForwardPreHook(m, func(Module, *tensor.Tensor) { log = append(log, "a") })
	rmB := RegisterForwardPreHook(m, func(Module, *tensor.Tensor) { log = append(log, "b") })
	rmC := RegisterForwardHook(m, func(Module, *tensor.Tensor, *tensor.Tensor) { log = append(log, "c") })
	rmB()
	rmB()
	Call(m, tensor.New([]float32{1}, 1))
	if want := []string{"a", "forward", "c"}; !slices.Equal(log, want) {
		t.Fatalf("ran %v, want %v", log, want)
	}
	if !HasForwardHooks(m) {
		t.Fatal("HasForwardHooks false with two hooks registered")
	}
	rmA()
	rmC()
	if HasForwardHooks(m) || m.hooks != nil {
		t.Fatalf("hooks left after removing all: %v", m.hooks)
	}
	log = nil
	Call(m, tensor.New([]float32{1}, 1))
	if want := []string{"forward"}; !slices.Equal(log, want) {
		t.Fatalf("ran %v, want %v", log, want)
	}
}

// TestCallHookRemovesItself: a hook may remove itself while Call runs the
// hooks; the others still run this time.
func TestCallHookRemovesItself(t *testing.T) {
	var log []string
	m := &logged{log: &log}
	var rm func()
	rm = RegisterForwardPreHook(m, func(Module, *tensor.Tensor) { log = append(log, "once"); rm() })
	RegisterForwardPreHook(m, func(Module, *tensor.Tensor) { log = append(log, "always") })
	Call(m, tensor.New([]float32{1}, 1))
	Call(m, tensor.New([]float32{1}, 1))
	if want := []string{"once", "always", "forward", "always", "forward"}; !slices.Equal(log, want) {
		t.Fatalf("ran %v, want %v", log, want)
	}
}

// TestCallWithoutHooks is Forward.
func TestCallWithoutHooks(t *testing.T) {
	var log []string
	m := &logged{log: &log}
	if y := Call(m, tensor.New([]float32{3}, 1)); y.Item() != 6 || !slices.Equal(log, []string{"forward"}) || HasForwardHooks(m) {
		t.Fatalf("Call without hooks: %v, log %v", y.Data(), log)
	}
}

// TestSequentialCallsChildrenThroughCall: a Sequential runs its children
// through Call, and does not fuse a hooked child into the run before it
// (the Conv2d, ReLU, MaxPool2d run that is otherwise one op); the output
// is the same.
func TestSequentialCallsChildrenThroughCall(t *testing.T) {
	SetSeed(11)
	conv, relu, pool := Conv2d(2, 3, 3), ReLU(), MaxPool2d(2)
	s := Sequential(conv, relu, pool)
	x := tensor.Randn(tensor.NewRNG(4), 1, 2, 6, 6)
	want := fmt.Sprint(s.Forward(x).Data())
	var ran []string
	RegisterForwardHook(relu, func(Module, *tensor.Tensor, *tensor.Tensor) { ran = append(ran, "relu") })
	RegisterForwardPreHook(pool, func(Module, *tensor.Tensor) { ran = append(ran, "pool") })
	if got := fmt.Sprint(Call(s, x).Data()); got != want {
		t.Fatalf("hooked output %s, want %s", got, want)
	}
	if !slices.Equal(ran, []string{"relu", "pool"}) {
		t.Fatalf("child hooks ran %v, want [relu pool]", ran)
	}
}
