package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// lnClose reports whether got is within a float32 rounding tolerance of
// want, relative to scale (the size of the terms summed).
func lnClose(got float32, want, scale float64) bool {
	return math.Abs(float64(got)-want) <= 1e-5*math.Max(1, scale)
}

// TestLayerNormKernels checks the LayerNorm row kernels (vector code and
// Go tail) against float64 versions of their reference loops at every
// length up to 41 and at 128 and 131, adding into non-zero gradients.
func TestLayerNormKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vec := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	lengths := []int{128, 131}
	for n := 0; n <= 41; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		x, w, b, g := vec(n, 2), vec(n, 1), vec(n, 1), vec(n, 1)
		m, rstd := float32(0.3), float32(0.7)

		var want, scale float64
		for _, v := range x {
			d := float64(v) - float64(m)
			want += d * d
			scale += d * d
		}
		if got := SumSqDev(x, m); !lnClose(got, want, scale) {
			t.Fatalf("n=%d: SumSqDev = %v, want %v", n, got, want)
		}

		out := vec(n, 1)
		LayerNormAffine(out, x, w, b, m, rstd)
		for i, v := range x {
			want := (float64(v)-float64(m))*float64(rstd)*float64(w[i]) + float64(b[i])
			if !lnClose(out[i], want, 1) {
				t.Fatalf("n=%d: LayerNormAffine[%d] = %v, want %v", n, i, out[i], want)
			}
		}

		pw, pb := vec(n, 1), vec(n, 1)
		pw0, pb0 := append([]float32(nil), pw...), append([]float32(nil), pb...)
		sg, sgx := LayerNormGradStats(pw, pb, x, g, w, m, rstd)
		var wsg, wsgx, abs float64
		for i, v := range x {
			xh := (float64(v) - float64(m)) * float64(rstd)
			gw := float64(g[i]) * float64(w[i])
			wsg += gw
			wsgx += gw * xh
			abs += math.Abs(gw) * math.Max(1, math.Abs(xh))
			if !lnClose(pw[i], float64(pw0[i])+float64(g[i])*xh, 1) || !lnClose(pb[i], float64(pb0[i])+float64(g[i]), 1) {
				t.Fatalf("n=%d: LayerNormGradStats pw[%d], pb[%d] = %v, %v", n, i, i, pw[i], pb[i])
			}
		}
		if !lnClose(sg, wsg, abs) || !lnClose(sgx, wsgx, abs) {
			t.Fatalf("n=%d: LayerNormGradStats = %v, %v, want %v, %v", n, sg, sgx, wsg, wsgx)
		}

		a, c := float32(0.1), float32(-0.2)
		for _, add := range []bool{false, true} {
			dx := vec(n, 1)
			dx0 := append([]float32(nil), dx...)
			LayerNormGradInput(dx, x, g, w, m, rstd, a, c, add)
			for i, v := range x {
				xh := (float64(v) - float64(m)) * float64(rstd)
				want := (float64(g[i])*float64(w[i]) - float64(a) - xh*float64(c)) * float64(rstd)
				if add {
					want += float64(dx0[i])
				}
				if !lnClose(dx[i], want, 1) {
					t.Fatalf("n=%d add=%v: LayerNormGradInput[%d] = %v, want %v", n, add, i, dx[i], want)
				}
			}
		}
	}
}

// TestLayerNormAVX512 checks the AVX-512 LayerNorm row kernels against
// the AVX2 ones bit for bit, NaN payloads included, for every length up
// to 300 (the kernels take n&^7: a 16-wide body and an 8-wide tail), on
// unaligned windows of guarded buffers, with all kinds of input (normal,
// large, random bit patterns, NaN/±Inf/±0/subnormals) and of m and rstd:
// the results, the sums, and that nothing outside the outputs, inputs
// included, is written.
func TestLayerNormAVX512(t *testing.T) {
	if !rowAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	bits := math.Float32bits
	// in returns an input in a guarded buffer, at offset off, and a copy
	// of the whole buffer to check it against.
	in := func(kind, n, off int) (buf, win, saved []float32) {
		buf, win = guarded(off, n)
		copy(win, vecInput(rng, kind, n))
		return buf, win, append([]float32(nil), buf...)
	}
	// out returns two guarded output buffers (AVX2's, AVX-512's), their
	// windows at offset off both holding init.
	out := func(off int, init []float32) (bufA, a, bufB, b []float32) {
		bufA, a = guarded(off, len(init))
		bufB, b = guarded(off, len(init))
		copy(a, init)
		copy(b, init)
		return bufA, a, bufB, b
	}
	check := func(what string, n, kind, off int, bufA, bufB []float32) {
		t.Helper()
		if i := firstBitDiff(bufA, bufB); i >= 0 {
			t.Fatalf("n=%d kind %d: %s[%d]: AVX-512 %#x, AVX2 %#x", n, kind, what, i-off, bits(bufB[i]), bits(bufA[i]))
		}
	}
	checkSum := func(what string, n, kind int, sa, sb float32) {
		t.Helper()
		if bits(sa) != bits(sb) {
			t.Fatalf("n=%d kind %d: %s: AVX-512 %v (%#x), AVX2 %v (%#x)", n, kind, what, sb, bits(sb), sa, bits(sa))
		}
	}
	for n := 1; n <= 300; n++ {
		body := n &^ 7
		if body == 0 {
			continue
		}
		for kind := range vecKinds {
			offs := [...]int{n % 16, (n + 3) % 16, (n + 7) % 13, (n + 1) % 11, (n + 5) % 9, (n + 2) % 7}
			xBuf, x, xSaved := in(kind, n, offs[0])
			wBuf, w, wSaved := in(kind, n, offs[1])
			bBuf, bias, bSaved := in(kind, n, offs[2])
			gBuf, g, gSaved := in(kind, n, offs[3])
			special := specialF32[(n+kind)%len(specialF32)]
			for _, p := range [][2]float32{{0.3, 0.7}, {-40, 3e4}, {x[0], 1e-30}, {special, x[n-1]}, {1e30, special}} {
				m, rstd := p[0], p[1]

				checkSum("SumSqDev", n, kind, sumSqDevAVX2(&x[0], body, m), sumSqDevAVX512(&x[0], body, m))

				bufA, a, bufB, b := out(offs[4], make([]float32, n))
				layerNormAffineAVX2(&a[0], &x[0], &w[0], &bias[0], body, m, rstd)
				layerNormAffineAVX512(&b[0], &x[0], &w[0], &bias[0], body, m, rstd)
				check("LayerNormAffine", n, kind, offs[4], bufA, bufB)

				pwBufA, pwA, pwBufB, pwB := out(offs[4], vecInput(rng, kind, n))
				pbBufA, pbA, pbBufB, pbB := out(offs[5], vecInput(rng, kind, n))
				sga, sgxa := layerNormGradStatsAVX2(&pwA[0], &pbA[0], &x[0], &g[0], &w[0], body, m, rstd)
				sgb, sgxb := layerNormGradStatsAVX512(&pwB[0], &pbB[0], &x[0], &g[0], &w[0], body, m, rstd)
				check("LayerNormGradStats pw", n, kind, offs[4], pwBufA, pwBufB)
				check("LayerNormGradStats pb", n, kind, offs[5], pbBufA, pbBufB)
				checkSum("LayerNormGradStats sg", n, kind, sga, sgb)
				checkSum("LayerNormGradStats sgx", n, kind, sgxa, sgxb)

				ac := [2]float32{sga, x[n/2]}
				if kind == 0 {
					ac = [2]float32{0.1, -0.2}
				}
				for add := range 2 {
					bufA, a, bufB, b := out(offs[5], vecInput(rng, kind, n))
					layerNormGradInputAVX2(&a[0], &x[0], &g[0], &w[0], body, m, rstd, ac[0], ac[1], add)
					layerNormGradInputAVX512(&b[0], &x[0], &g[0], &w[0], body, m, rstd, ac[0], ac[1], add)
					check(fmt.Sprintf("LayerNormGradInput add=%d", add), n, kind, offs[5], bufA, bufB)
				}
			}
			for _, c := range []struct {
				what       string
				buf, saved []float32
			}{{"x", xBuf, xSaved}, {"w", wBuf, wSaved}, {"b", bBuf, bSaved}, {"g", gBuf, gSaved}} {
				if i := firstBitDiff(c.buf, c.saved); i >= 0 {
					t.Fatalf("n=%d kind %d: input %s written at %d", n, kind, c.what, i)
				}
			}
		}
	}
}

// BenchmarkLayerNormKernels reports ns/row for the AVX2 and AVX-512
// LayerNorm row kernels on rows of 128 floats (the GPT's width), one call
// per row as tensor.LayerNorm makes them: over a block of 64 rows (x, g
// and the outputs in L1/L2, the kernels' own cost) and of 4096 rows (as
// tensor.LayerNorm streams a batch).
func BenchmarkLayerNormKernels(b *testing.B) {
	const d = 128
	rng := rand.New(rand.NewPCG(3, 4))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	type impl struct {
		name      string
		ok        bool
		sumSq     func(x *float32, n int, m float32) float32
		affine    func(out, x, w, b *float32, n int, m, rstd float32)
		gradStats func(pw, pb, x, gr, w *float32, n int, m, rstd float32) (float32, float32)
		gradInput func(dx, x, gr, w *float32, n int, m, rstd, a, c float32, add int)
	}
	impls := []impl{
		{"avx2", rowAsm(), sumSqDevAVX2, layerNormAffineAVX2, layerNormGradStatsAVX2, layerNormGradInputAVX2},
		{"avx512", rowAVX512, sumSqDevAVX512, layerNormAffineAVX512, layerNormGradStatsAVX512, layerNormGradInputAVX512},
	}
	for _, rows := range []int{16, 4096} {
		x, g, o := vec(rows*d), vec(rows*d), vec(rows*d)
		w, bias, pw, pb := vec(d), vec(d), make([]float32, d), make([]float32, d)
		kernels := []struct {
			name string
			row  func(k *impl, r int) float32 // one call on row r (its offset)
		}{
			{"SumSqDev", func(k *impl, r int) float32 { return k.sumSq(&x[r], d, 0.1) }},
			{"Affine", func(k *impl, r int) float32 {
				k.affine(&o[r], &x[r], &w[0], &bias[0], d, 0.1, 0.9)
				return 0
			}},
			{"GradStats", func(k *impl, r int) float32 {
				sg, sgx := k.gradStats(&pw[0], &pb[0], &x[r], &g[r], &w[0], d, 0.1, 0.9)
				return sg + sgx
			}},
			{"GradInput", func(k *impl, r int) float32 {
				k.gradInput(&o[r], &x[r], &g[r], &w[0], d, 0.1, 0.9, 0.01, 0.02, 1)
				return 0
			}},
		}
		for _, kern := range kernels {
			for i := range impls {
				k := &impls[i]
				b.Run(fmt.Sprintf("%s/rows=%d/%s", kern.name, rows, k.name), func(b *testing.B) {
					if !k.ok {
						b.Skip("not on this CPU")
					}
					var s float32
					for b.Loop() {
						for r := 0; r < rows*d; r += d {
							s += kern.row(k, r)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
					if s != s {
						b.Fatal("NaN sum")
					}
				})
			}
		}
	}
}
