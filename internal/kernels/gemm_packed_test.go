package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// packedCase is one product against columns j0..j0+n of a packed op(B)
// of k×nB.
type packedCase struct {
	transA, transB bool
	m, n, k, nB    int
	j0             int
	alpha, beta    float32
}

func (tc packedCase) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d nB=%d j0=%d alpha=%g beta=%g",
		tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.nB, tc.j0, tc.alpha, tc.beta)
}

// packedCases covers attention's block products (Q·Kᵀ and dO·Vᵀ: 32-row
// query blocks, key blocks of 32 to 128 from a 128-key head, heads of 32
// to 96) and the edges around them: rows that are no multiple of any
// register block, widths that are no multiple of 64 or 32, the thin-C
// paths (n ≤ 16), a k over one row block (kc = 256), column offsets the
// micro-panels do not start at, and transposed A.
func packedCases() []packedCase {
	var out []packedCase
	scale := float32(1 / math.Sqrt(32))
	for _, k := range []int{32, 64, 96} {
		for _, m := range []int{32, 1, 5, 7, 13, 45} {
			for _, n := range []int{32, 64, 96, 128, 80, 100, 45, 17, 16, 3} {
				for _, ab := range [][2]float32{{scale, 0}, {1, 0}, {1, 1}, {0.5, 0.25}} {
					out = append(out, packedCase{false, true, m, n, k, 128, 0, ab[0], ab[1]})
				}
			}
		}
	}
	for _, j0 := range []int{32, 64, 128, 5, 200} {
		for _, n := range []int{16, 32, 64, 100} {
			out = append(out, packedCase{false, true, 13, n, 64, 300, j0, 1, 0})
		}
	}
	for _, tc := range []packedCase{
		{false, true, 45, 130, 300, 130, 0, 0.5, 1},
		{false, true, 6, 70, 520, 200, 64, 1, 0},
		{true, true, 13, 64, 32, 128, 64, 1, 0.5},
		{true, false, 33, 100, 40, 160, 32, 1, 0},
		{false, false, 7, 64, 32, 128, 64, 0.25, 0},
		{false, true, 12, 64, 32, 64, 0, 0, 0.5},
		{false, true, 12, 0, 32, 64, 64, 1, 0},
		{false, true, 0, 64, 32, 64, 0, 1, 0},
		{false, true, 12, 64, 0, 64, 0, 1, 0.5},
	} {
		out = append(out, tc)
	}
	return out
}

// packedOperands returns random A, B and C for tc, rows padded to the
// stride of attention's fused qkv (384 floats) where they fit in it.
func packedOperands(tc packedCase) (a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	r := rand.New(rand.NewPCG(uint64(tc.m), uint64(tc.n*1009+tc.k*31+tc.j0)))
	ld := func(cols int) int { return max(cols, 384) }
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = ac, ar
	}
	br, bc := tc.k, tc.nB
	if tc.transB {
		br, bc = bc, br
	}
	lda, ldb, ldc = ld(ac), ld(bc), ld(tc.n)
	a = randSlice(r, max(ar*lda, 1))
	b = randSlice(r, max(br*ldb, 1))
	c = randSlice(r, max(tc.m*ldc, 1))
	return a, lda, b, ldb, c, ldc
}

// checkPacked compares, bit for bit, C from the packed product run by
// packed with C from serial, sgemmSerial's product of the same operands
// (B from column j0), on the same starting C.
func checkPacked(t *testing.T, name string, tc packedCase,
	packed func(p *PackedB, a []float32, lda int, b []float32, ldb int, c []float32, ldc int),
	serial func(a []float32, lda int, b []float32, ldb int, c []float32, ldc int)) {
	t.Helper()
	a, lda, b, ldb, c, ldc := packedOperands(tc)
	want := append([]float32(nil), c...)
	bj := b
	if tc.j0 > 0 {
		if tc.transB {
			bj = b[tc.j0*ldb:]
		} else {
			bj = b[tc.j0:]
		}
	}
	serial(a, lda, bj, ldb, want, ldc)
	var p PackedB
	for round := range 2 { // the second packs into the first's buffers
		got := append([]float32(nil), c...)
		packed(&p, a, lda, b, ldb, got, ldc)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s %v round %d: c[%d] = %v, SgemmSerial %v", name, tc, round, i, got[i], want[i])
			}
		}
	}
}

// TestSgemmPackedBMatchesSerial checks every implementation's packed
// products against its sgemmSerial, bit for bit.
func TestSgemmPackedBMatchesSerial(t *testing.T) {
	for _, impl := range impls() {
		for _, tc := range packedCases() {
			checkPacked(t, impl.name, tc, func(p *PackedB, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
				p.packWith(impl, tc.transB, tc.k, tc.nB, b, ldb)
				SgemmPackedB(tc.transA, tc.m, tc.n, tc.k, tc.alpha, a, lda, p, tc.j0, tc.beta, c, ldc)
			}, func(a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
				sgemmWith(impl, 1, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, nil, c, ldc)
			})
		}
	}
}

// TestSgemmPackedBPublic checks Pack and SgemmPackedB against SgemmSerial
// on the implementation this build runs (the portable one with noasm).
func TestSgemmPackedBPublic(t *testing.T) {
	for _, tc := range packedCases() {
		checkPacked(t, gemm.name, tc, func(p *PackedB, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			p.Pack(tc.transB, tc.k, tc.nB, b, ldb)
			SgemmPackedB(tc.transA, tc.m, tc.n, tc.k, tc.alpha, a, lda, p, tc.j0, tc.beta, c, ldc)
		}, func(a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			SgemmSerial(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
		})
	}
}

// TestSgemmPackedBObserved checks that a GEMM observer sees a packed
// product as the SgemmSerial call it replaces.
func TestSgemmPackedBObserved(t *testing.T) {
	var calls []GemmCall
	prev := SetGemmObserver(func(c GemmCall) { calls = append(calls, c) })
	defer SetGemmObserver(prev)
	tc := packedCase{false, true, 32, 96, 32, 128, 0, 1, 0}
	a, lda, b, ldb, c, ldc := packedOperands(tc)
	var p PackedB
	p.Pack(true, tc.k, tc.nB, b, ldb)
	SgemmPackedB(false, tc.m, tc.n, tc.k, 1, a, lda, &p, 0, 0, c, ldc)
	SetGemmObserver(prev)
	if len(calls) != 1 {
		t.Fatalf("observer saw %d calls, want 1", len(calls))
	}
	got := calls[0]
	got.Elapsed = 0
	want := GemmCall{TransA: false, TransB: true, M: 32, N: 96, K: 32, Serial: true}
	if got != want {
		t.Fatalf("observer saw %+v, want %+v", got, want)
	}
}

// TestSgemmPackedBPanics checks that operands which do not fit are refused.
func TestSgemmPackedBPanics(t *testing.T) {
	b := make([]float32, 64*32)
	var p PackedB
	p.Pack(true, 32, 64, b, 32)
	a, c := make([]float32, 8*32), make([]float32, 8*64)
	for name, f := range map[string]func(){
		"B too short":      func() { new(PackedB).Pack(true, 32, 65, b, 32) },
		"B stride":         func() { new(PackedB).Pack(true, 32, 64, b, 16) },
		"columns past end": func() { SgemmPackedB(false, 8, 32, 32, 1, a, 32, &p, 40, 0, c, 64) },
		"other k":          func() { SgemmPackedB(false, 8, 32, 16, 1, a, 32, &p, 0, 0, c, 64) },
		"A too short":      func() { SgemmPackedB(false, 9, 32, 32, 1, a, 32, &p, 0, 0, c, 64) },
		"C too short":      func() { SgemmPackedB(false, 8, 64, 32, 1, a, 32, &p, 0, 0, c, 32) },
	} {
		if !panics(f) {
			t.Errorf("%s: no panic", name)
		}
	}
}

// TestSgemmPackedBUsesPacking checks that attention's block products run
// from the packed panels on every implementation rather than falling back
// to packing B again.
func TestSgemmPackedBUsesPacking(t *testing.T) {
	b := make([]float32, 128*32)
	for _, impl := range impls() {
		var p PackedB
		p.packWith(impl, true, 32, 128, b, 32)
		for _, n := range []int{32, 64, 96, 128} {
			if p.implFor(false, 32, n, 32, 1, 0) == nil {
				t.Errorf("%s: the 32×%d×32 product does not use the packed panels", impl.name, n)
			}
		}
	}
}

// BenchmarkSgemmPackedB times attention's score products (32 query rows
// by 32 to 128 keys, heads of 32, rows of the fused qkv's 384 floats):
// SgemmSerial packing Kᵀ at every call against products from panels
// packed once, with the last columns on the full-width panels ("packed")
// or on narrower ones ("packed-tail", what SgemmPackedB runs). Compare
// the GFLOP/s of the cases within one run.
func BenchmarkSgemmPackedB(b *testing.B) {
	defer SetNumThreads(SetNumThreads(1))
	const m, k, keys, ld = 32, 32, 128, 384
	r := rand.New(rand.NewPCG(1, 2))
	q, kt, c := randSlice(r, m*ld), randSlice(r, keys*ld), make([]float32, m*keys)
	var p PackedB
	p.Pack(true, k, keys, kt, ld)
	for _, n := range []int{32, 64, 96, 128} {
		impl := p.implFor(false, m, n, k, 1, 0)
		for _, v := range []struct {
			name string
			run  func()
		}{
			{"serial", func() { SgemmSerial(false, true, m, n, k, 1, q, ld, kt, ld, 0, c, keys) }},
			{"packed", func() { p.sgemm(impl, false, false, m, n, k, 1, q, ld, 0, 0, c, keys) }},
			{"packed-tail", func() { SgemmPackedB(false, m, n, k, 1, q, ld, &p, 0, 0, c, keys) }},
		} {
			b.Run(fmt.Sprintf("n=%d/%s", n, v.name), func(b *testing.B) {
				for b.Loop() {
					v.run()
				}
				b.ReportMetric(2*m*float64(n)*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
