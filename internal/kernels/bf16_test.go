package kernels

import (
	"math"
	"math/big"
	"testing"
)

// bf16Ref rounds v to bfloat16 (8 significant bits, ties to even) with
// math/big, independently of the bit trick.
func bf16Ref(v float32) float32 {
	if v != v || math.IsInf(float64(v), 0) || v == 0 {
		return v
	}
	if math.Abs(float64(v)) < 0x1p-126 {
		// Below the normal range bf16's step is fixed, 2⁻¹³³ (7 fraction
		// bits under float32's smallest exponent); the result may reach it.
		return float32(math.RoundToEven(float64(v)*0x1p133) * 0x1p-133)
	}
	f := new(big.Float).SetPrec(8).SetMode(big.ToNearestEven).SetFloat64(float64(v))
	r, _ := f.Float64()
	// Values beyond bf16's largest finite round to infinity, as do values
	// past float32's range in big.Float's conversion.
	if math.Abs(r) > math.MaxFloat32 {
		return float32(math.Inf(int(math.Copysign(1, r))))
	}
	return float32(r)
}

func TestRoundBF16(t *testing.T) {
	cases := []float32{
		1, -1, 0.1, 1.00390625, // 1 + 2⁻⁸: a tie, rounds down to even 1
		1.01171875,                  // 1 + 3·2⁻⁸: a tie, rounds up to even
		1.0039063,                   // just above the tie: up
		math.MaxFloat32,             // rounds to +Inf
		-math.MaxFloat32,            // and −Inf
		math.SmallestNonzeroFloat32, // subnormal: stays
		1.1754942e-38,               // largest subnormal: rounds to the smallest normal
		float32(math.Inf(1)), float32(math.Inf(-1)),
		3.3895314e38, // bf16's largest finite: stays
	}
	for i := 0; i < 1<<16; i++ {
		// A spread of bit patterns, every exponent, odd and even kept halves.
		cases = append(cases, math.Float32frombits(uint32(i)*65537+uint32(i*7919)))
	}
	got := make([]float32, len(cases))
	RoundBF16(got, cases)
	for i, v := range cases {
		want := bf16Ref(v)
		if v != v {
			if got[i] == got[i] {
				t.Fatalf("RoundBF16(NaN %#x) = %v, want NaN", math.Float32bits(v), got[i])
			}
			continue
		}
		if math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Fatalf("RoundBF16(%g = %#x) = %g (%#x), want %g (%#x)", v, math.Float32bits(v), got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
		}
		if math.Float32bits(got[i])&0xffff != 0 {
			t.Fatalf("RoundBF16(%g) = %#x has low bits set", v, math.Float32bits(got[i]))
		}
	}
}

func TestRoundBF16Exact(t *testing.T) {
	// The product of two bf16 values is exact in float32: 8+8 significant
	// bits fit in 24.
	xs := []float32{1.1, -3.7, 1e-3, 255.5, 7e5}
	r := make([]float32, len(xs))
	RoundBF16(r, xs)
	for _, a := range r {
		for _, b := range r {
			if float64(a*b) != float64(a)*float64(b) {
				t.Errorf("%g·%g not exact in float32", a, b)
			}
		}
	}
}
