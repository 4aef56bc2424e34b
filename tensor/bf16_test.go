package tensor

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

func TestBFloat16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want float32
	}{
		{1, 1}, {-2.5, -2.5},
		{1.00390625, 1},        // tie: to even
		{1.01171875, 1.015625}, // tie: to even, upwards
		{3.14159265, 3.140625}, // nearest
		{65504, 65536},         // fp16's max rounds up in bf16
		{float32(math.Inf(-1)), float32(math.Inf(-1))},
	} {
		if got := ToBFloat16(c.in).Float32(); got != c.want {
			t.Errorf("ToBFloat16(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if v := ToBFloat16(float32(math.NaN())).Float32(); v == v {
		t.Errorf("ToBFloat16(NaN) = %v", v)
	}
	if ToBFloat16(1) != 0x3f80 {
		t.Errorf("ToBFloat16(1) bits %#x, want 0x3f80", uint16(ToBFloat16(1)))
	}
}

func TestParsePrecision(t *testing.T) {
	for _, s := range []string{"fp32", "bf16"} {
		p, err := ParsePrecision(s)
		if err != nil || p.String() != s {
			t.Errorf("ParsePrecision(%q) = %v, %v", s, p, err)
		}
	}
	for _, s := range []string{"", "BF16", "fp16", "float32"} {
		if _, err := ParsePrecision(s); err == nil || !strings.Contains(err.Error(), "want fp32 or bf16") {
			t.Errorf("ParsePrecision(%q) error %v", s, err)
		}
	}
}

// TestAutocastRefused: without a native kernel and without the opt-in,
// Autocast does not run its function and names what is missing.
func TestAutocastRefused(t *testing.T) {
	if kernels.NativeBF16() {
		t.Skip("this build has a native bf16 kernel")
	}
	SetBF16Emulation(false)
	ran := false
	err := Autocast(BF16, func() { ran = true })
	if ran || !errors.Is(err, ErrBF16Unsupported) || !strings.Contains(err.Error(), "BF16") {
		t.Fatalf("Autocast(BF16) ran=%v err=%v, want refused naming the CPU feature", ran, err)
	}
	if err := Autocast(FP32, func() { ran = true }); err != nil || !ran {
		t.Fatalf("Autocast(FP32) ran=%v err=%v", ran, err)
	}
}

// roundedT returns a copy of t with its values rounded to bf16.
func roundedT(t *Tensor) *Tensor {
	d := make([]float32, len(t.data))
	kernels.RoundBF16(d, t.data)
	return New(d, t.shape...)
}

// withEmulation runs f under emulated bf16 autocast.
func withEmulation(t *testing.T, f func()) {
	t.Helper()
	SetBF16Emulation(true)
	defer SetBF16Emulation(false)
	if err := Autocast(BF16, f); err != nil {
		t.Fatal(err)
	}
	if AutocastPrecision() != FP32 {
		t.Fatal("Autocast did not restore fp32")
	}
}

// TestAutocastOps checks each autocast op against float32 on rounded
// operands, bit for bit: forward from rounded inputs and weights; the
// input and weight gradients from the rounded output gradient; the bias
// gradient from the unrounded one.
func TestAutocastOps(t *testing.T) {
	rng := NewRNG(71)
	x0 := randT(rng, -1, 1, 3, 4, 7, 7)
	cw0, cb0 := randT(rng, -1, 1, 6, 2, 3, 3), randT(rng, -1, 1, 6)
	lx0 := randT(rng, -1, 1, 5, 12)
	lw0, lb0 := randT(rng, -1, 1, 7, 12), randT(rng, -1, 1, 7)
	mb0 := randT(rng, -1, 1, 7, 12)
	o := ConvOptions{Padding: [2]int{1, 1}, Groups: 2}
	type op struct {
		name    string
		ins     []*Tensor
		hasBias bool
		f       func(in []*Tensor) *Tensor
	}
	ops := []op{
		{"Conv2d", []*Tensor{x0, cw0, cb0}, true, func(in []*Tensor) *Tensor { return Conv2dWith(in[0], in[1], in[2], o) }},
		{"Conv2d+ReLU", []*Tensor{x0, cw0, cb0}, true, func(in []*Tensor) *Tensor { return Conv2dWith(in[0], in[1], in[2], o, PostReLU) }},
		{"Linear", []*Tensor{lx0, lw0, lb0}, true, func(in []*Tensor) *Tensor { return Linear(in[0], in[1], in[2]) }},
		{"MatMul", []*Tensor{lx0, mb0}, false, func(in []*Tensor) *Tensor { return MatMul(in[0], in[1], false, true) }},
	}
	for _, c := range ops {
		leaves := func(round bool) []*Tensor {
			var l []*Tensor
			for k, t := range c.ins {
				if round && (k < 2) { // the bias is not a product operand
					t = roundedT(t)
				}
				l = append(l, t.Detach().SetRequiresGrad(true))
			}
			return l
		}
		// Autocast run.
		a := leaves(false)
		var ya *Tensor
		withEmulation(t, func() { ya = c.f(a) })
		gout := randT(rng, -2, 2, ya.shape...)
		if err := ya.BackwardWith(gout); err != nil { // backward after Autocast returned
			t.Fatal(err)
		}
		// float32 on rounded operands.
		r := leaves(true)
		yr := c.f(r)
		if err := yr.BackwardWith(roundedT(gout)); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ya.data) != fmt.Sprint(yr.data) {
			t.Fatalf("%s: autocast output differs from float32 on rounded operands", c.name)
		}
		for k := 0; k < 2; k++ {
			if fmt.Sprint(a[k].Grad().data) != fmt.Sprint(r[k].Grad().data) {
				t.Fatalf("%s: autocast gradient of input %d differs", c.name, k)
			}
		}
		if c.hasBias && c.name != "Conv2d+ReLU" {
			// db is the plain sum of the unrounded output gradient.
			p := New(append([]float32(nil), c.ins[2].data...), c.ins[2].shape...).SetRequiresGrad(true)
			y := c.f([]*Tensor{c.ins[0], c.ins[1], p})
			if err := y.BackwardWith(gout); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(a[2].Grad().data) != fmt.Sprint(p.Grad().data) {
				t.Fatalf("%s: autocast bias gradient is not the float32 one", c.name)
			}
		}
		// Master weights untouched.
		if fmt.Sprint(a[1].data) != fmt.Sprint(c.ins[1].data) {
			t.Fatalf("%s: autocast changed the weight", c.name)
		}
	}
	// Outside Autocast everything is float32 again.
	y := Linear(lx0, lw0, lb0)
	yr := Linear(roundedT(lx0), roundedT(lw0), lb0)
	if fmt.Sprint(y.data) == fmt.Sprint(yr.data) {
		t.Fatal("Linear after Autocast still rounds")
	}
}
