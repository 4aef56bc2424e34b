package nn

import (
	"fmt"
	"reflect"
	"strings"
)

// Repr describes m and its children in the layout of PyTorch's
// print(model), so the two can be compared line by line:
//
//	Sequential(
//	  (0): Flatten(start_dim=1, end_dim=-1)
//	  (1): Linear(in_features=784, out_features=10, bias=True)
//	)
//
// Leaves print their String method; a module with children prints its Go
// type name ("Sequential" for Sequential) and the children indented.
func Repr(m Module) string {
	var b strings.Builder
	writeRepr(&b, m, "")
	return b.String()
}

func writeRepr(b *strings.Builder, m Module, indent string) {
	children := m.base().children
	if len(children) == 0 {
		if s, ok := m.(fmt.Stringer); ok {
			b.WriteString(s.String())
		} else {
			b.WriteString(typeName(m) + "()")
		}
		return
	}
	b.WriteString(typeName(m) + "(\n")
	for _, c := range children {
		fmt.Fprintf(b, "%s  (%s): ", indent, c.name)
		if _, ok := m.(*MultiheadAttentionLayer); ok && c.name == "out_proj" {
			// PyTorch's MultiheadAttention holds a Linear subclass of
			// this name.
			b.WriteString("NonDynamicallyQuantizable")
		}
		writeRepr(b, c.m, indent+"  ")
		b.WriteString("\n")
	}
	b.WriteString(indent + ")")
}

// typeName is m's Go type name without package or pointer; this package's
// containers drop their "Layer" suffix to read as in PyTorch.
func typeName(m Module) string {
	t := reflect.TypeOf(m)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() == reflect.TypeOf(Base{}).PkgPath() {
		return strings.TrimSuffix(t.Name(), "Layer")
	}
	return t.Name()
}

// pyBool formats b as Python does.
func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// pyPair formats a (height, width) pair as a Python tuple.
func pyPair(p [2]int) string { return fmt.Sprintf("(%d, %d)", p[0], p[1]) }

// pyIntOrPair formats a pair as one int when both are equal, as PyTorch's
// pools print what they were given.
func pyIntOrPair(p [2]int) string {
	if p[0] == p[1] {
		return fmt.Sprint(p[0])
	}
	return pyPair(p)
}
