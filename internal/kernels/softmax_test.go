package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSoftmaxRowKernels checks ExpShiftSum, MaxOf, SubMul and Dot (vector
// code and Go tail) against float64 versions of their reference loops at
// every length up to 41 and at 64 and 131, and ExpShiftSum's edge cases
// (±Inf, NaN, the underflow bound) against Exp.
func TestSoftmaxRowKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vec := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	lengths := []int{64, 131}
	for n := 0; n <= 41; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		x, y := vec(n, 3), vec(n, 1)
		wmax := math.Inf(-1)
		var wdot, abs float64
		for i, v := range x {
			wmax = math.Max(wmax, float64(v))
			wdot += float64(v) * float64(y[i])
			abs += math.Abs(float64(v) * float64(y[i]))
		}
		if got := MaxOf(x); float64(got) != wmax {
			t.Fatalf("n=%d: MaxOf = %v, want %v", n, got, wmax)
		}
		if got := Dot(x, y); math.Abs(float64(got)-wdot) > 1e-6*math.Max(1, abs) {
			t.Fatalf("n=%d: Dot = %v, want %v", n, got, wdot)
		}

		m := float32(wmax)
		if n == 0 {
			m = 0
		}
		dst := make([]float32, n)
		sum := ExpShiftSum(dst, x, m)
		var wsum float64
		for i, v := range x {
			want := math.Exp(float64(v - m)) // the shift is rounded to float32 first
			wsum += want
			if math.Abs(float64(dst[i])-want) > 3e-7*want {
				t.Fatalf("n=%d: ExpShiftSum[%d] = %v, want %v", n, i, dst[i], want)
			}
		}
		if math.Abs(float64(sum)-wsum) > 1e-6*math.Max(1, wsum) {
			t.Fatalf("n=%d: ExpShiftSum = %v, want %v", n, sum, wsum)
		}

		dp := vec(n, 1)
		dp0 := append([]float32(nil), dp...)
		SubMul(dp, dst, 0.25)
		for i := range dp {
			want := float64(dst[i]) * (float64(dp0[i]) - 0.25)
			if math.Abs(float64(dp[i])-want) > 1e-7*math.Max(1, math.Abs(want)) {
				t.Fatalf("n=%d: SubMul[%d] = %v, want %v", n, i, dp[i], want)
			}
		}
	}

	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	edge := []float32{0, -1, 1, inf, -inf, nan, 88, -87, -90, 200, -200, 1e-8, 3, -3, nan, inf, 5}
	for _, m := range []float32{0, 2, -2} {
		got := make([]float32, len(edge))
		ExpShiftSum(got, edge, m)
		want := make([]float32, len(edge))
		for i, v := range edge {
			want[i] = v - m
		}
		Exp(want, want)
		for i := range edge {
			if !(got[i] == want[i] || got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("ExpShiftSum(%v − %v) = %v, Exp gives %v", edge[i], m, got[i], want[i])
			}
		}
	}
}

// TestSoftmaxAVX512 checks the AVX-512 softmax row kernels against the
// AVX2 ones for every length up to 300 (the kernels take n&^7; the rest
// must stay untouched), unaligned, on all kinds of input: ExpShiftSum's
// results and sum, SubMul's and Dot's bit for bit; MaxOf's maximum (by
// ==: the two may pick different zeros), where x holds no NaN.
func TestSoftmaxAVX512(t *testing.T) {
	if !rowAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	bits := math.Float32bits
	for n := 1; n <= 300; n++ {
		body := n &^ 7
		if body == 0 {
			continue
		}
		for kind := range vecKinds {
			off := n % 6
			x, y := vecInput(rng, kind, n), vecInput(rng, kind, n)

			hasNaN := false
			wmax := float32(math.Inf(-1))
			for _, v := range x[:body] {
				hasNaN = hasNaN || v != v
				wmax = max(wmax, v)
			}
			ma, mb := maxOfAVX2(&x[0], body), maxOfAVX512(&x[0], body)
			if !hasNaN && (ma != wmax || mb != wmax) {
				t.Fatalf("n=%d kind %d: MaxOf: AVX-512 %v, AVX2 %v, want %v", n, kind, mb, ma, wmax)
			}
			if da, db := dotAVX2(&x[0], &y[0], body), dotAVX512(&x[0], &y[0], body); bits(da) != bits(db) {
				t.Fatalf("n=%d kind %d: Dot: AVX-512 %v (%#x), AVX2 %v (%#x)", n, kind, db, bits(db), da, bits(da))
			}

			for _, m := range []float32{wmax, 0, 2.5, -40, x[0]} {
				bufA, a := guarded(off, n)
				bufB, b := guarded(off, n)
				sa := expShiftSumAVX2(&a[0], &x[0], body, m)
				sb := expShiftSumAVX512(&b[0], &x[0], body, m)
				if i := firstBitDiff(bufA, bufB); i >= 0 {
					t.Fatalf("n=%d kind %d m=%v: ExpShiftSum[%d]: AVX-512 %#x, AVX2 %#x", n, kind, m, i-off, bits(bufB[i]), bits(bufA[i]))
				}
				if bits(sa) != bits(sb) {
					t.Fatalf("n=%d kind %d m=%v: ExpShiftSum sum: AVX-512 %v (%#x), AVX2 %v (%#x)", n, kind, m, sb, bits(sb), sa, bits(sa))
				}
				copy(b, x) // in place
				if sb := expShiftSumAVX512(&b[0], &b[0], body, m); bits(sa) != bits(sb) || firstBitDiff(a[:body], b[:body]) >= 0 {
					t.Fatalf("n=%d kind %d m=%v: ExpShiftSum in place differs", n, kind, m)
				}

				copy(a, y)
				copy(b, y)
				subMulAVX2(&a[0], &x[0], body, m)
				subMulAVX512(&b[0], &x[0], body, m)
				if i := firstBitDiff(bufA, bufB); i >= 0 {
					t.Fatalf("n=%d kind %d d=%v: SubMul[%d]: AVX-512 %#x, AVX2 %#x", n, kind, m, i-off, bits(bufB[i]), bits(bufA[i]))
				}
			}
		}
	}
}

// BenchmarkExpShiftSumRows reports ns/elem for the AVX2 and AVX-512
// kernels behind ExpShiftSum over a block of 64 rows of scores, one row
// at a time: rows of 64 as in attention's full blocks, "causal" rows of
// 8, 16, …, 64 (each row's keys rounded up to 8) as in its diagonal
// blocks, rows of 24 (a 16-float body and an 8-float tail), and rows of
// 256 as cross-entropy's.
func BenchmarkExpShiftSumRows(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows = 64
	for _, shape := range []string{"64", "causal", "24", "256"} {
		stride, lens := 0, make([]int, rows)
		for r := range lens {
			switch shape {
			case "causal":
				stride, lens[r] = 64, (r+1+7)&^7
			default:
				fmt.Sscan(shape, &stride)
				lens[r] = stride
			}
		}
		total := 0
		for _, l := range lens {
			total += l
		}
		src := make([]float32, rows*stride)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * 3)
		}
		dst := make([]float32, len(src))
		for _, k := range []struct {
			name string
			ok   bool
			f    func(dst, src *float32, n int, m float32) float32
		}{{"avx2", rowAsm(), expShiftSumAVX2}, {"avx512", rowAVX512, expShiftSumAVX512}} {
			b.Run(fmt.Sprintf("n=%s/%s", shape, k.name), func(b *testing.B) {
				if !k.ok {
					b.Skip("not on this CPU")
				}
				var s float32
				for b.Loop() {
					for r, l := range lens {
						s += k.f(&dst[r*stride], &src[r*stride], l, 4)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/elem")
				if s != s {
					b.Fatal("NaN sum")
				}
			})
		}
	}
}
