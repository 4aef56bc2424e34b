package kernels

import (
	"math"
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
