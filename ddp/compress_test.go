package ddp

import (
	"math"
	"testing"
)

func TestFloat16RoundTrip(t *testing.T) {
	cases := []struct {
		in   float32
		want float32
	}{
		{0, 0}, {1, 1}, {-2.5, -2.5}, {65504, 65504}, {1e6, float32(math.Inf(1))},
		{5.960464477539063e-08, 5.960464477539063e-08}, // smallest subnormal
		{1e-9, 0},
		{1.0009765625, 1.0009765625},         // 1 + 2^-10, exact
		{1.00048828125, 1},                   // halfway between 1 and 1+2^-10: ties to even
		{1.00146484375, 1.001953125},         // halfway, odd below: rounds up
		{0.1, 0.0999755859375},               // nearest half to 0.1
		{-6.103515625e-05, -6.103515625e-05}, // smallest normal
	}
	for _, c := range cases {
		got := float16ToFloat32(float32ToFloat16(c.in))
		if got != c.want {
			t.Errorf("fp16(%g) = %g, want %g", c.in, got, c.want)
		}
	}
	if v := float16ToFloat32(float32ToFloat16(float32(math.NaN()))); !math.IsNaN(float64(v)) {
		t.Errorf("fp16(NaN) = %g", v)
	}
	// Every half value decodes and re-encodes to itself.
	for h := 0; h < 1<<16; h++ {
		f := float16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := float32ToFloat16(f); back != uint16(h) {
			t.Fatalf("half %#04x -> %g -> %#04x", h, f, back)
		}
	}
}

func TestBFloat16Rounding(t *testing.T) {
	// 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; the even one is 1.
	if got := bfloat16ToFloat32(float32ToBFloat16(1 + 1.0/256)); got != 1 {
		t.Errorf("bf16(1+2^-8) = %g, want 1", got)
	}
	if got := bfloat16ToFloat32(float32ToBFloat16(1 + 3.0/256)); got != 1+4.0/256 {
		t.Errorf("bf16(1+3·2^-8) = %g, want %g", got, 1+4.0/256)
	}
	if got := bfloat16ToFloat32(float32ToBFloat16(3e38)); math.Abs(float64(got)-3e38)/3e38 > 1.0/128 {
		t.Errorf("bf16(3e38) = %g", got)
	}
}
