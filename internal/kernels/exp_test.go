package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestExp compares Exp (vector code where the CPU has it) with Exp32 and
// math.Exp over softmax's range, at every length up to 40 for the tails,
// and checks the edge values.
func TestExp(t *testing.T) {
	const n = 100003
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(-90 + 180*float64(i)/n)
	}
	dst := make([]float32, n)
	Exp(dst, src)
	for i, x := range src {
		want := math.Exp(float64(x))
		if x < expLo {
			want = 0
		}
		if x > expHi {
			want = math.Inf(1)
		}
		got := float64(dst[i])
		if math.IsInf(want, 1) {
			if !math.IsInf(got, 1) {
				t.Fatalf("Exp(%v) = %v, want +Inf", x, got)
			}
			continue
		}
		if math.Abs(got-want) > 3e-7*want {
			t.Fatalf("Exp(%v) = %v, want %v", x, got, want)
		}
		if s := float64(Exp32(x)); math.Abs(s-want) > 3e-7*want {
			t.Fatalf("Exp32(%v) = %v, want %v", x, s, want)
		}
	}
	edge := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, -100, 100, 1, -1, 88.7, -87.3}
	for l := 0; l <= 40; l++ {
		in := make([]float32, l)
		for i := range in {
			in[i] = edge[(i+l)%len(edge)]
		}
		out := make([]float32, l)
		Exp(out, in)
		for i, x := range in {
			want := Exp32(x)
			if x != x {
				if out[i] == out[i] {
					t.Fatalf("len %d: Exp(NaN) = %v", l, out[i])
				}
				continue
			}
			if math.Abs(float64(out[i]-want)) > 3e-7*math.Abs(float64(want)) && !(math.IsInf(float64(want), 1) && math.IsInf(float64(out[i]), 1)) {
				t.Fatalf("len %d: Exp(%v) = %v, Exp32 %v", l, x, out[i], want)
			}
		}
	}
	// In place.
	x := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8}
	Exp(x, x)
	if math.Abs(float64(x[8])-math.Exp(8)) > 1e-3 {
		t.Fatalf("in place: e^8 = %v", x[8])
	}
}

func BenchmarkExp(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = -float32(i%1000) / 100
	}
	y := make([]float32, len(x))
	for b.Loop() {
		Exp(y, x)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/elem")
}

// specialF32 are the inputs around which the vector kernels branch (by
// masks): NaNs (with payloads and sign), infinities, zeros, subnormals,
// Exp's bounds and their neighbours, and GELU's split points (|x|/√2 =
// 0.9 and 4), clamp (±20) and underflow of e^(−x²/2) (|x| ≈ 13.2).
var specialF32 = func() []float32 {
	nan := func(b uint32) float32 { return math.Float32frombits(b) }
	out := []float32{nan(0x7fc00000), nan(0xffc00000), nan(0x7f800001), nan(0x7fc12345),
		float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)),
		1e-40, -1e-40, math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32,
		1, -1, 1e-8, -1e-8, 88.7, -88.7, 87.3, -87.3, 100, -100, 200, -200, 20, -20, 30, -30, 13.2, -13.2}
	for _, v := range []float32{expHi, expLo, 0.9 * math.Sqrt2, 4 * math.Sqrt2, 13.19, 20} {
		for _, w := range []float32{v, -v} {
			up := math.Nextafter32(w, float32(math.Inf(1)))
			down := math.Nextafter32(w, float32(math.Inf(-1)))
			out = append(out, w, up, down)
		}
	}
	return out
}()

// vecInput returns n inputs for the AVX2/AVX-512 comparisons. kind 0 is
// N(0, 3²), 1 uniform on ±100 (past both of Exp's bounds), 2 random bit
// patterns (NaNs, infinities, subnormals included), 3 specialF32 mixed
// with kind 0.
func vecInput(rng *rand.Rand, kind, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch kind {
		case 0:
			x[i] = float32(rng.NormFloat64() * 3)
		case 1:
			x[i] = float32(200*rng.Float64() - 100)
		case 2:
			x[i] = math.Float32frombits(rng.Uint32())
		default:
			if rng.IntN(2) == 0 {
				x[i] = specialF32[rng.IntN(len(specialF32))]
			} else {
				x[i] = float32(rng.NormFloat64() * 3)
			}
		}
	}
	return x
}

const vecKinds = 4

// firstBitDiff returns the first index where a and b differ in bits, or
// −1 (NaNs compare by payload too).
func firstBitDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// guarded returns a buffer of off+n+16 floats, all set to a sentinel NaN,
// and its window [off, off+n): kernels may write only the window, which
// is unaligned for off ≠ 0 (mod 16).
func guarded(off, n int) (buf, win []float32) {
	buf = make([]float32, off+n+16)
	for i := range buf {
		buf[i] = math.Float32frombits(0x7fadbeef)
	}
	return buf, buf[off : off+n]
}

// TestExpAVX512 checks that expF32AVX512 gives expF32AVX2's bits for every
// length up to 300 (the kernels take n&^7; the rest must stay untouched),
// unaligned, on all kinds of input, and in place.
func TestExpAVX512(t *testing.T) {
	if !rowAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 1; n <= 300; n++ {
		body := n &^ 7
		if body == 0 {
			continue
		}
		for kind := range vecKinds {
			off := n % 5
			src := vecInput(rng, kind, n)
			bufA, a := guarded(off, n)
			bufB, b := guarded(off, n)
			expF32AVX2(&a[0], &src[0], body)
			expF32AVX512(&b[0], &src[0], body)
			if i := firstBitDiff(bufA, bufB); i >= 0 {
				t.Fatalf("n=%d kind %d: [%d]: AVX-512 %#x, AVX2 %#x", n, kind, i-off, math.Float32bits(bufB[i]), math.Float32bits(bufA[i]))
			}
			copy(b, src) // in place
			expF32AVX512(&b[0], &b[0], body)
			if i := firstBitDiff(bufA[:off+body], bufB[:off+body]); i >= 0 {
				t.Fatalf("n=%d kind %d in place: [%d]: AVX-512 %#x, AVX2 %#x", n, kind, i-off, math.Float32bits(bufB[i]), math.Float32bits(bufA[i]))
			}
		}
	}
}

// BenchmarkExpKernels reports ns/elem for the AVX2 and AVX-512 kernels
// behind Exp on a 256-float slice (in L1).
func BenchmarkExpKernels(b *testing.B) {
	x := make([]float32, 256)
	for i := range x {
		x[i] = -float32(i%1000) / 25
	}
	y := make([]float32, len(x))
	for _, k := range []struct {
		name string
		ok   bool
		f    func(dst, src *float32, n int)
	}{{"avx2", rowAsm(), expF32AVX2}, {"avx512", rowAVX512, expF32AVX512}} {
		b.Run(fmt.Sprintf("%s/n=%d", k.name, len(x)), func(b *testing.B) {
			if !k.ok {
				b.Skip("not on this CPU")
			}
			for b.Loop() {
				k.f(&y[0], &x[0], len(x))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/elem")
		})
	}
}
