package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGELU compares GELU (vector code where the CPU has it, and the Go
// tail) and its derivative with the float64 formulas, at every length up
// to 40 and over a wide range, with the edge values.
func TestGELU(t *testing.T) {
	check := func(x, out, deriv []float32) {
		t.Helper()
		for i, v := range x {
			f := float64(v)
			if v != v {
				if out[i] == out[i] || deriv[i] == deriv[i] {
					t.Fatalf("GELU(NaN) = %v, %v", out[i], deriv[i])
				}
				continue
			}
			cdf := 0.5 * (1 + math.Erf(f/math.Sqrt2))
			want, dwant := f*cdf, cdf
			if !math.IsInf(f, 0) {
				dwant += f * math.Exp(-f*f/2) / math.Sqrt(2*math.Pi)
			}
			if math.IsInf(f, -1) {
				want = 0 // PyTorch: -inf·0 is NaN; ours gives -inf·0.5·(1−1)
			}
			if math.IsInf(want, 0) {
				if float64(out[i]) != want {
					t.Fatalf("GELU(%v) = %v, want %v", v, out[i], want)
				}
			} else if v != float32(math.Inf(-1)) && math.Abs(float64(out[i])-want) > 3e-7*math.Max(1, math.Abs(f)) {
				t.Fatalf("GELU(%v) = %v, want %v", v, out[i], want)
			}
			if math.Abs(float64(deriv[i])-dwant) > 1e-6 {
				t.Fatalf("GELU'(%v) = %v, want %v", v, deriv[i], dwant)
			}
		}
	}
	const n = 40009
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(-12 + 24*float64(i)/n)
	}
	out, deriv := make([]float32, n), make([]float32, n)
	GELU(out, deriv, x)
	check(x, out, deriv)
	geluGeneric(out, deriv, x)
	check(x, out, deriv)
	edge := []float32{float32(math.NaN()), float32(math.Inf(1)), 0, -0.9, 0.9, 2.828427, -2.828427, 5.6, -5.7, 30, -30}
	for l := 0; l <= 40; l++ {
		in := make([]float32, l)
		for i := range in {
			in[i] = edge[(i*7+l)%len(edge)]
		}
		o, d := make([]float32, l), make([]float32, l)
		GELU(o, d, in)
		check(in, o, d)
	}
}

func BenchmarkGELU(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i%1000)/125 - 4
	}
	o, d := make([]float32, len(x)), make([]float32, len(x))
	for b.Loop() {
		GELU(o, d, x)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/elem")
}

// TestGELUAVX512 checks that geluAVX512 gives geluAVX2's bits, value and
// derivative, for every length up to 300 (the kernels take n&^7; the rest
// must stay untouched), unaligned, on all kinds of input.
func TestGELUAVX512(t *testing.T) {
	if !rowAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 1; n <= 300; n++ {
		body := n &^ 7
		if body == 0 {
			continue
		}
		for kind := range vecKinds {
			off := n % 7
			x := vecInput(rng, kind, n)
			outA, oa := guarded(off, n)
			derA, da := guarded(off, n)
			outB, ob := guarded(off, n)
			derB, db := guarded(off, n)
			geluAVX2(&oa[0], &da[0], &x[0], body)
			geluAVX512(&ob[0], &db[0], &x[0], body)
			if i := firstBitDiff(outA, outB); i >= 0 {
				t.Fatalf("n=%d kind %d: GELU(%v) [%d]: AVX-512 %#x, AVX2 %#x", n, kind, x[i-off], i-off, math.Float32bits(outB[i]), math.Float32bits(outA[i]))
			}
			if i := firstBitDiff(derA, derB); i >= 0 {
				t.Fatalf("n=%d kind %d: GELU'(%v) [%d]: AVX-512 %#x, AVX2 %#x", n, kind, x[i-off], i-off, math.Float32bits(derB[i]), math.Float32bits(derA[i]))
			}
		}
	}
}

// BenchmarkGELUKernels reports ns/elem for the AVX2 and AVX-512 kernels
// behind GELU on one chunk of tensor.GELU (256 floats).
func BenchmarkGELUKernels(b *testing.B) {
	x := make([]float32, geluChunk)
	for i := range x {
		x[i] = float32(i%1000)/32 - 4
	}
	o, d := make([]float32, len(x)), make([]float32, len(x))
	for _, k := range []struct {
		name string
		ok   bool
		f    func(out, deriv, x *float32, n int)
	}{{"avx2", rowAsm(), geluAVX2}, {"avx512", rowAVX512, geluAVX512}} {
		b.Run(fmt.Sprintf("%s/n=%d", k.name, len(x)), func(b *testing.B) {
			if !k.ok {
				b.Skip("not on this CPU")
			}
			for b.Loop() {
				k.f(&o[0], &d[0], &x[0], len(x))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/elem")
		})
	}
}
