package nn

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

func TestConv2dDilationGroupsRepr(t *testing.T) {
	f := mustFixtures(t)
	c := Conv2d(4, 6, 3, Padding(2), DilationHW(2, 1), Groups(2), NoBias())
	if got, want := c.String(), f.Reprs["conv_dilation_groups"]; got != want {
		t.Errorf("String() = %s, PyTorch %s", got, want)
	}
	if got := fmt.Sprint(c.Weight.Shape()); got != "[6 2 3 3]" {
		t.Errorf("weight shape %s, want [6 2 3 3]", got)
	}
}

// TestConv2dGroupsFusedSequential checks that a grouped, dilated conv in a
// Sequential (fused with its ReLU and pooling) matches the layers run one
// by one.
func TestConv2dGroupsFusedSequential(t *testing.T) {
	conv := Conv2d(4, 6, 3, Padding(2), Dilation(2), Groups(2))
	seq := Sequential(conv, ReLU(), MaxPool2d(2))
	x := tensor.Randn(tensor.NewRNG(5), 2, 4, 8, 8)
	want := MaxPool2d(2).Forward(ReLU().Forward(conv.Forward(x)))
	got := seq.Forward(x)
	if fmt.Sprint(got.Data()) != fmt.Sprint(want.Data()) {
		t.Fatal("fused Sequential differs from the layers one by one")
	}
}

func TestConv2dBadGroups(t *testing.T) {
	for _, c := range []struct {
		f    func()
		want string
	}{
		{func() { Conv2d(4, 6, 3, Groups(4)) }, "channels not divisible by 4 groups"},
		{func() { Conv2d(4, 6, 3, Groups(0)) }, "groups must be positive"},
		{func() { Conv2d(4, 6, 3, Dilation(0)) }, "dilation must be positive"},
		{func() { Conv2d(1, 1, 3, Dilation(3)).Forward(tensor.Zeros(1, 1, 6, 6)) }, "smaller than the dilated kernel 7x7"},
	} {
		msg := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			c.f()
			return ""
		}()
		if !strings.Contains(msg, c.want) {
			t.Errorf("panic %q, want it to contain %q", msg, c.want)
		}
	}
}
