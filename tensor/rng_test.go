package tensor

import (
	"math"
	"slices"
	"testing"
)

func TestRNGDeterministic(t *testing.T) {
	a, b := NewRNG(42), NewRNG(42)
	for i := 0; i < 100; i++ {
		if a.Uint64() != b.Uint64() {
			t.Fatal("same seed gave different streams")
		}
	}
	if NewRNG(1).Uint64() == NewRNG(2).Uint64() {
		t.Fatal("seeds 1 and 2 start alike")
	}
	x, y := Randn(NewRNG(7), 3, 4), Randn(NewRNG(7), 3, 4)
	if !slices.Equal(x.Data(), y.Data()) {
		t.Fatal("Randn not reproducible")
	}
}

func TestRNGDistributions(t *testing.T) {
	r := NewRNG(3)
	const n = 20000
	x := Zeros(n)
	r.FillNormal(x, 2, 0.5)
	mean, std := moments(x.Data())
	// Standard errors: 0.5/√n ≈ 0.0035 for the mean.
	if math.Abs(mean-2) > 0.02 || math.Abs(std-0.5) > 0.02 {
		t.Errorf("FillNormal(2, 0.5): mean %.4f std %.4f", mean, std)
	}
	r.FillUniform(x, -3, 1)
	for _, v := range x.Data() {
		if v < -3 || v >= 1 {
			t.Fatalf("FillUniform(-3, 1) gave %v", v)
		}
	}
	mean, std = moments(x.Data())
	if math.Abs(mean+1) > 0.05 || math.Abs(std-4/math.Sqrt(12)) > 0.05 {
		t.Errorf("FillUniform(-3, 1): mean %.4f std %.4f", mean, std)
	}
	u := Rand(r, n)
	for _, v := range u.Data() {
		if v < 0 || v >= 1 {
			t.Fatalf("Rand gave %v", v)
		}
	}
	hits := 0
	for i := 0; i < n; i++ {
		if r.Bernoulli(0.3) {
			hits++
		}
		if v := r.Uniform(5, 6); v < 5 || v >= 6 {
			t.Fatalf("Uniform(5, 6) gave %v", v)
		}
	}
	if p := float64(hits) / n; math.Abs(p-0.3) > 0.015 {
		t.Errorf("Bernoulli(0.3) rate %.4f", p)
	}
	var s float64
	for i := 0; i < n; i++ {
		s += float64(r.Normal())
	}
	if m := s / n; math.Abs(m) > 0.03 {
		t.Errorf("Normal mean %.4f", m)
	}
	p := r.Perm(50)
	q := slices.Clone(p)
	slices.Sort(q)
	for i, v := range q {
		if v != i {
			t.Fatalf("Perm(50) = %v is not a permutation", p)
		}
	}
}

func moments(x []float32) (mean, std float64) {
	for _, v := range x {
		mean += float64(v)
	}
	mean /= float64(len(x))
	for _, v := range x {
		d := float64(v) - mean
		std += d * d
	}
	return mean, math.Sqrt(std / float64(len(x)))
}

func TestDropoutRateAndEdgeCases(t *testing.T) {
	x := Full(1, 100000)
	y := Dropout(x, 0.25, true, NewRNG(1))
	kept := 0
	for _, v := range y.Data() {
		if v != 0 {
			kept++
		}
	}
	if r := float64(kept) / 100000; math.Abs(r-0.75) > 0.01 {
		t.Errorf("kept %.4f at p=0.25", r)
	}
	if got := Dropout(x, 0, true, NewRNG(1)); got != x {
		t.Error("p=0 must return the input")
	}
	for _, v := range Dropout(Full(1, 7), 1, true, NewRNG(1)).Data() {
		if v != 0 {
			t.Fatal("p=1 must zero everything")
		}
	}
}

// TestDropoutMaskRates checks the drop rate of both mask widths (16-bit
// draws for rates that round to 2^-16 closely, 32-bit for the rest) and
// that the rate rounding rule picks the width it should.
func TestDropoutMaskRates(t *testing.T) {
	for _, c := range []struct {
		keep float32
		bits uint
	}{{0.5, 16}, {0.75, 16}, {0.9, 16}, {0.7, 16}, {0.99, 32}, {0.999, 32}, {0.001, 32}} {
		if got := maskBits(c.keep); got != c.bits {
			t.Errorf("maskBits(%v) = %d, want %d", c.keep, got, c.bits)
		}
		const n = 400003 // odd: exercises the tail of both loops
		mask := make([]float32, n)
		scale := 1 / c.keep
		dropoutMask(mask, scale, c.keep, NewRNG(7))
		kept := 0
		for i, v := range mask {
			switch v {
			case scale:
				kept++
			case 0:
			default:
				t.Fatalf("keep %v: mask[%d] = %v, neither 0 nor %v", c.keep, i, v, scale)
			}
		}
		p := float64(c.keep)
		sd := math.Sqrt(n * p * (1 - p))
		if d := math.Abs(float64(kept) - n*p); d > 5*sd {
			t.Errorf("keep %v: kept %d of %d, want %.0f ± %.0f", c.keep, kept, n, n*p, 5*sd)
		}
	}
}

// TestDropoutStream pins Dropout's chunked, vectorised mask to the one a
// single dropoutMask call draws (so seeded runs and fixtures are
// unchanged): the same output bits, the same mask (as the gradient of a
// sum), and the RNG left at the same place, for both mask widths and
// lengths around the chunk size, with NaNs, infinities and negative
// values among the inputs.
func TestDropoutStream(t *testing.T) {
	for _, p := range []float32{0.25, 0.5, 0.3, 0.01} {
		for _, n := range []int{1, 7, 64, dropoutChunk - 1, dropoutChunk, dropoutChunk + 5, 3*dropoutChunk + 18} {
			rng := NewRNG(uint64(n))
			x := Randn(rng, n)
			x.data[0] = float32(math.NaN())
			if n > 2 {
				x.data[1], x.data[2] = float32(math.Inf(-1)), -1
			}
			x.SetRequiresGrad(true)
			keep := 1 - p
			want := make([]float32, n)
			ref := NewRNG(9)
			dropoutMask(want, 1/keep, keep, ref)
			// Dropout of the leaf accumulates into its gradient; of a
			// product with ones, writes a fresh buffer.
			for _, viaOp := range []bool{false, true} {
				in := x
				if viaOp {
					in = Mul(x, Full(1, n))
				}
				x.SetGrad(nil)
				got := NewRNG(9)
				y := Dropout(in, p, true, got)
				for i, m := range want {
					if w := x.data[i] * m; math.Float32bits(y.data[i]) != math.Float32bits(w) {
						t.Fatalf("p=%v n=%d: out[%d] = %v, want %v", p, n, i, y.data[i], w)
					}
				}
				if err := Sum(y, false).Backward(); err != nil {
					t.Fatal(err)
				}
				for i, m := range want {
					if g := x.Grad().data[i]; math.Float32bits(g) != math.Float32bits(m) {
						t.Fatalf("p=%v n=%d viaOp=%v: mask[%d] = %v, want %v", p, n, viaOp, i, g, m)
					}
				}
				if !viaOp {
					if a, b := got.Uint64(), ref.Uint64(); a != b {
						t.Fatalf("p=%v n=%d: RNG left at a different place", p, n)
					}
				}
			}
		}
	}
}
