package nn

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// mustPanic runs f and returns its panic message, failing if it does not
// panic.
func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("did not panic")
		}
		msg = fmt.Sprint(r)
	}()
	f()
	return ""
}

// twoTower is a user-defined module: named children, one shared.
type twoTower struct {
	Base
	enc, dec *LinearLayer
	scale    *tensor.Tensor
}

func newTwoTower() *twoTower {
	m := &twoTower{enc: Linear(3, 2), dec: Linear(2, 3)}
	m.scale = m.RegisterParameter("scale", tensor.Full(1, 1))
	m.Register("enc", m.enc)
	m.Register("dec", m.dec)
	return m
}

func (m *twoTower) Forward(x *tensor.Tensor) *tensor.Tensor {
	return tensor.Mul(m.dec.Forward(m.enc.Forward(x)), m.scale)
}

func names(es []Named) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

func TestCustomModuleNames(t *testing.T) {
	m := newTwoTower()
	got := names(NamedParameters(m))
	want := []string{"scale", "enc.weight", "enc.bias", "dec.weight", "dec.bias"}
	if !slices.Equal(got, want) {
		t.Fatalf("NamedParameters %v, want %v", got, want)
	}
	params := Parameters(m)
	for i, p := range NamedParameters(m) {
		if params[i] != p.Tensor {
			t.Errorf("Parameters[%d] is not %s", i, p.Name)
		}
		if !p.Tensor.RequiresGrad() {
			t.Errorf("%s does not require grad", p.Name)
		}
	}
	var mods []string
	for _, nm := range NamedModules(m) {
		mods = append(mods, nm.Name)
	}
	if !slices.Equal(mods, []string{"", "enc", "dec"}) {
		t.Errorf("NamedModules %v", mods)
	}
	y := m.Forward(tensor.Zeros(4, 3))
	if !slices.Equal(y.Shape(), []int{4, 3}) {
		t.Errorf("forward shape %v", y.Shape())
	}
}

func TestSharedModuleListedOnceAsParameterTwiceInStateDict(t *testing.T) {
	shared := Linear(3, 3)
	m := Sequential(shared, ReLU(), shared)
	if got := names(NamedParameters(m)); !slices.Equal(got, []string{"0.weight", "0.bias"}) {
		t.Errorf("NamedParameters %v, want the shared layer once", got)
	}
	if got := names(StateDict(m)); !slices.Equal(got, []string{"0.weight", "0.bias", "2.weight", "2.bias"}) {
		t.Errorf("StateDict %v, want both names as PyTorch", got)
	}
}

func TestRegistrationMistakesPanic(t *testing.T) {
	cases := map[string]struct {
		f    func()
		want string
	}{
		"duplicate": {func() {
			var b Base
			b.RegisterParameter("w", tensor.Zeros(1))
			b.RegisterBuffer("w", tensor.Zeros(1), Float32)
		}, `nn: "w" is already registered as a parameter`},
		"dotted":   {func() { var b Base; b.Register("a.b", ReLU()) }, `nn: invalid module attribute name "a.b"`},
		"empty":    {func() { var b Base; b.RegisterParameter("", tensor.Zeros(1)) }, `nn: invalid module attribute name ""`},
		"self":     {func() { s := Sequential(); s.Register("me", s) }, "nn: Register \"me\": a module cannot be its own child"},
		"nil":      {func() { Sequential(nil) }, "nn: Register \"0\": nil module"},
		"option":   {func() { Linear(2, 3, Stride(2)) }, "nn: Linear does not take option Stride"},
		"negative": {func() { Linear(-1, 3) }, "nn: Linear(-1, 3): negative size"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if msg := mustPanic(t, c.f); !strings.HasPrefix(msg, c.want) {
				t.Errorf("panic %q, want prefix %q", msg, c.want)
			}
		})
	}
}

func TestLinearWrongInputShapePanicsNamingBothShapes(t *testing.T) {
	l := Linear(784, 512)
	msg := mustPanic(t, func() { l.Forward(tensor.Zeros(64, 10)) })
	if want := "nn: Linear(784→512): input [64 10] does not match in_features 784"; msg != want {
		t.Errorf("panic %q, want %q", msg, want)
	}
	msg = mustPanic(t, func() { l.Forward(tensor.Scalar(1)) })
	if want := "nn: Linear(784→512): input [] does not match in_features 784"; msg != want {
		t.Errorf("panic %q, want %q", msg, want)
	}
}

func TestSetTrainIsRecursive(t *testing.T) {
	inner := Sequential(ReLU(), Linear(2, 2))
	m := Sequential(Linear(2, 2), inner)
	for _, nm := range NamedModules(m) {
		if !nm.Module.base().Training() {
			t.Fatalf("%q not in training mode by default", nm.Name)
		}
	}
	SetTrain(m, false)
	for _, nm := range NamedModules(m) {
		if nm.Module.base().Training() {
			t.Errorf("%q still training after SetTrain(false)", nm.Name)
		}
	}
	SetTrain(inner, true)
	if m.Training() || !inner.Training() || !inner.At(1).(*LinearLayer).Training() {
		t.Error("SetTrain on a child changed the parent or missed a grandchild")
	}
}

func TestFlattenAndSoftmaxLayers(t *testing.T) {
	x := tensor.Zeros(2, 3, 4, 5)
	if got := Flatten().Forward(x).Shape(); !slices.Equal(got, []int{2, 60}) {
		t.Errorf("Flatten: %v", got)
	}
	if got := FlattenFrom(2).Forward(x).Shape(); !slices.Equal(got, []int{2, 3, 20}) {
		t.Errorf("FlattenFrom(2): %v", got)
	}
	msg := mustPanic(t, func() { Softmax(2).Forward(tensor.Zeros(2, 3)) })
	if !strings.HasPrefix(msg, "nn: Softmax(dim=2): dim 2 out of range for input [2 3]") {
		t.Errorf("panic %q", msg)
	}
	p := Softmax(-1).Forward(tensor.New([]float32{1, 1, 3, 3}, 2, 2)).Data()
	if p[0] != 0.5 || p[3] != 0.5 {
		t.Errorf("softmax of equal logits %v", p)
	}
}
