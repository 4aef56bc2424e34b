package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// bf16Paths lists the SgemmBF16 implementations to test here: the
// emulation always, each kernel this machine can run (both AMX and
// AVX512_BF16 on a CPU that has both, though SgemmBF16 uses only AMX).
func bf16Paths() []bf16Impl {
	p := []bf16Impl{bf16Emulated}
	if amxAvailable() {
		p = append(p, bf16AMX)
	}
	if avx512BF16Available() {
		p = append(p, bf16AVX512)
	}
	return p
}

func bf16PathName(impl bf16Impl) string { return impl.String() }

// roundedF32 returns x rounded to bf16 (a copy).
func roundedF32(x []float32) []float32 {
	out := make([]float32, len(x))
	RoundBF16(out, x)
	return out
}

// checkGemmBF16 runs one case and compares every element of C with a
// float64 reference over the bf16-rounded operands (their products are
// exact, so only the float32 sums differ), relative to the magnitude of
// the terms; C's padding must be untouched and, with beta 0, NaNs in C
// must not propagate.
func checkGemmBF16(t testing.TB, native bf16Impl, threads int, tc gemmCase, seed uint64) {
	t.Helper()
	checkGemmRun(t, bf16PathName(native), threads, tc, seed, roundedF32, func(a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
		sgemmBF16(native, threads, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	})
}

var (
	bf16Alphas = []float32{1, 0.5, -2}
	bf16Betas  = []float32{0, 1, 0.25}
)

// TestSgemmBF16Sizes crosses sizes around the 16- and 32-wide tiles in m,
// n and k, every transpose case, the alpha and beta values and padded
// leading dimensions.
func TestSgemmBF16Sizes(t *testing.T) {
	sizes := []int{1, 15, 16, 17, 31, 33, 63, 64, 65, 100}
	if testing.Short() {
		sizes = []int{1, 16, 17, 33, 65}
	}
	for _, native := range bf16Paths() {
		n := 0
		for _, tr := range trans {
			for _, m := range sizes {
				for _, nn := range sizes {
					for _, k := range sizes {
						n++
						tc := gemmCase{tr[0], tr[1], m, nn, k, bf16Alphas[n%3], bf16Betas[n/3%3], n % 3 * 5}
						checkGemmBF16(t, native, 1, tc, 1)
					}
				}
			}
		}
	}
}

// TestSgemmBF16Large covers K of several chunks and C of several panels,
// beyond the packed-A row block, with one and two threads.
func TestSgemmBF16Large(t *testing.T) {
	shapes := [][3]int{
		{257, 257, 257}, {513, 65, 100}, {33, 513, 257}, {100, 100, 513},
		{513, 513, 33}, {1, 513, 513}, {513, 1, 64}, {200, 300, 17},
	}
	for _, native := range bf16Paths() {
		for i, s := range shapes {
			for j, tr := range trans {
				tc := gemmCase{tr[0], tr[1], s[0], s[1], s[2], bf16Alphas[(i+j)%3], bf16Betas[(i+2*j)%3], (i + j) % 2 * 3}
				checkGemmBF16(t, native, 1+j%2, tc, 2)
			}
		}
		// C = A·B, whose whole blocks the kernel stores itself, over
		// several K chunks with partial blocks at both edges.
		for _, tr := range trans {
			checkGemmBF16(t, native, 1, gemmCase{tr[0], tr[1], 289, 70, 600, 1, 0, 2}, 3)
		}
		// A C of few rows (the kernel runs along each row panel in groups
		// of B panels), whole and partial, over one and several K chunks.
		for i, tr := range trans {
			checkGemmBF16(t, native, 1, gemmCase{tr[0], tr[1], 32, 700, 300, 1, 0, 1}, 4)
			checkGemmBF16(t, native, 1, gemmCase{tr[0], tr[1], 32, 676, 9, 1, 0, 0}, 4)
			checkGemmBF16(t, native, 1+i%2, gemmCase{tr[0], tr[1], 20, 1100, 40, 0.5, 1, 3}, 4)
			checkGemmBF16(t, native, 1, gemmCase{tr[0], tr[1], 64, 600, 290, 1, 0, 0}, 4)
			checkGemmBF16(t, native, 1, gemmCase{tr[0], tr[1], 50, 530, 70, -2, 0.25, 2}, 4)
		}
	}
}

// TestSgemmBF16Deterministic checks that one and two threads give the same
// bits, as ranks with different thread counts need (64×30: the threads
// split the rows, not the columns).
func TestSgemmBF16Deterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 3))
	shapes := [][3]int{{64, 512, 784}, {300, 40, 129}, {257, 257, 257}, {7, 1000, 33}, {1000, 7, 40}, {64, 30, 600}}
	for _, native := range bf16Paths() {
		for _, s := range shapes {
			m, n, k := s[0], s[1], s[2]
			for _, tr := range trans {
				lda, ldb := k, n
				if tr[0] {
					lda = m
				}
				if tr[1] {
					ldb = k
				}
				a, b := randSlice(r, m*k), randSlice(r, k*n)
				c0 := randSlice(r, m*n)
				want := append([]float32(nil), c0...)
				got := append([]float32(nil), c0...)
				sgemmBF16(native, 1, tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 1, want, n)
				sgemmBF16(native, 2, tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 1, got, n)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s m=%d n=%d k=%d trans=%v: C[%d]=%g with 2 threads, %g with 1", bf16PathName(native), m, n, k, tr, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestSgemmBF16NonFinite: a NaN in A makes its row of C NaN, an infinity
// makes it infinite (B has no zeros), other rows stay finite.
func TestSgemmBF16NonFinite(t *testing.T) {
	for _, native := range bf16Paths() {
		for _, tr := range trans {
			m, n, k := 40, 37, 70
			r := rand.New(rand.NewPCG(7, 7))
			a, b := randSlice(r, m*k), randSlice(r, k*n)
			for i := range b {
				if b[i] == 0 {
					b[i] = 1
				}
			}
			lda, ldb := k, n
			at := func(i, p int) int { return i*k + p }
			if tr[0] {
				lda = m
				at = func(i, p int) int { return p*m + i }
			}
			if tr[1] {
				ldb = k
			}
			a[at(3, 5)] = float32(math.NaN())
			a[at(20, 69)] = float32(math.Inf(1))
			a[at(33, 40)] = float32(math.Inf(-1))
			c := make([]float32, m*n)
			sgemmBF16(native, 1, tr[0], tr[1], m, n, k, 1, a, lda, b, ldb, 0, c, n)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					v := float64(c[i*n+j])
					switch i {
					case 3:
						if !math.IsNaN(v) {
							t.Fatalf("%s %v: C[%d,%d]=%g, want NaN", bf16PathName(native), tr, i, j, v)
						}
					case 20, 33:
						if !math.IsInf(v, 0) {
							t.Fatalf("%s %v: C[%d,%d]=%g, want ±Inf", bf16PathName(native), tr, i, j, v)
						}
					default:
						if math.IsNaN(v) || math.IsInf(v, 0) {
							t.Fatalf("%s %v: C[%d,%d]=%g, want finite", bf16PathName(native), tr, i, j, v)
						}
					}
				}
			}
		}
	}
}

// TestSgemmBF16Degenerate: k = 0 or alpha = 0 give C = beta·C (beta 0
// clearing NaNs) without reading A or B.
func TestSgemmBF16Degenerate(t *testing.T) {
	nan := float32(math.NaN())
	for _, native := range bf16Paths() {
		c := []float32{nan, 2, 3, 4}
		sgemmBF16(native, 1, false, false, 2, 2, 0, 1, nil, 1, nil, 2, 0, c, 2)
		for _, v := range c {
			if v != 0 {
				t.Fatalf("%s k=0 beta=0: C=%v", bf16PathName(native), c)
			}
		}
		c = []float32{1, 1}
		sgemmBF16(native, 1, false, false, 1, 2, 1, 0, []float32{nan}, 1, []float32{nan, nan}, 2, 1, c, 2)
		if c[0] != 1 || c[1] != 1 {
			t.Fatalf("%s alpha=0: C=%v", bf16PathName(native), c)
		}
	}
}

// TestSgemmBF16Public runs the exported entry point and checks its labels.
func TestSgemmBF16Public(t *testing.T) {
	if got := BF16Kernel(); (got != "emulated") != NativeBF16() || got != nativeBF16Impl().String() {
		t.Fatalf("BF16Kernel() = %q with NativeBF16() = %v", got, NativeBF16())
	}
	wantName := map[[2]bool]string{{true, true}: "amx", {true, false}: "amx", {false, true}: "avx512bf16", {false, false}: "emulated"}[[2]bool{amxAvailable(), avx512BF16Available() && dpbf16FullRate()}]
	if got := BF16Kernel(); got != wantName {
		t.Fatalf("BF16Kernel() = %q, want %q (AMX %v, AVX512_BF16 %v)", got, wantName, amxAvailable(), avx512BF16Available())
	}
	r := rand.New(rand.NewPCG(9, 9))
	m, n, k := 70, 130, 90
	a, b := randSlice(r, m*k), randSlice(r, n*k)
	c := make([]float32, m*n)
	want := make([]float32, m*n)
	defer SetNumThreads(SetNumThreads(2))
	SgemmBF16(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
	Sgemm(false, true, m, n, k, 1, roundedF32(a), k, roundedF32(b), k, 0, want, n)
	for i := range c {
		if d := math.Abs(float64(c[i] - want[i])); d > 1e-4*math.Sqrt(float64(k)) {
			t.Fatalf("C[%d]=%g, Sgemm on rounded operands %g", i, c[i], want[i])
		}
	}
	x := make([]float32, 6)
	for name, f := range map[string]func(){
		"short A":   func() { SgemmBF16(false, false, 2, 2, 3, 1, x[:5], 3, x, 2, 0, x, 2) },
		"small lda": func() { SgemmBF16(false, false, 2, 2, 3, 1, x, 2, x, 2, 0, x, 2) },
		"negative":  func() { SgemmBF16(false, false, -1, 2, 3, 1, x, 3, x, 2, 0, x, 2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func FuzzSgemmBF16(f *testing.F) {
	f.Add(uint8(1), uint8(1), uint8(1), uint8(0), uint16(0))
	f.Add(uint8(33), uint8(49), uint8(65), uint8(3), uint16(1))
	f.Fuzz(func(t *testing.T, m, n, k, tr uint8, seed uint16) {
		tc := gemmCase{tr&1 != 0, tr&2 != 0, int(m), int(n), int(k), bf16Alphas[seed%3], bf16Betas[seed/3%3], int(seed % 3)}
		for _, native := range bf16Paths() {
			checkGemmBF16(t, native, 1+int(seed%2), tc, uint64(seed))
		}
	})
}

// TestSgemmBF16Subnormal pins down what each path does below float32's
// normal range: the emulation keeps subnormal operands and sums, the AMX
// unit and VDPBF16PS treat them as zero (SgemmBF16's doc says so), and
// do so whatever MXCSR says (Go leaves DAZ and FTZ clear).
func TestSgemmBF16Subnormal(t *testing.T) {
	for _, native := range bf16Paths() {
		// A subnormal operand (2⁻¹³⁰) times 2¹⁰⁰, and a normal one (2⁻¹²⁶).
		// K is amxMinK (zeros after the first term) so that the native
		// path runs on the tiles.
		const k = amxMinK
		a := make([]float32, 2*k)
		a[0], a[k] = float32(math.Ldexp(1, -130)), float32(math.Ldexp(1, -126))
		b := make([]float32, k)
		b[0] = float32(math.Ldexp(1, 100))
		c := make([]float32, 2)
		sgemmBF16(native, 1, false, false, 2, 1, k, 1, a, k, b, 1, 0, c, 1)
		// Normal operands whose product (2⁻¹⁴⁰) is subnormal.
		d := make([]float32, 1)
		x := make([]float32, k)
		x[0] = float32(math.Ldexp(1, -70))
		sgemmBF16(native, 1, false, false, 1, 1, k, 1, x, k, x, 1, 0, d, 1)
		want := []float32{float32(math.Ldexp(1, -30)), float32(math.Ldexp(1, -26)), float32(math.Ldexp(1, -140))}
		if native != bf16Emulated {
			want[0], want[2] = 0, 0
		}
		if got := []float32{c[0], c[1], d[0]}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("%s: got %g, want %g", bf16PathName(native), got, want)
		}
	}
}

func TestBF16Missing(t *testing.T) {
	got := BF16Missing()
	if NativeBF16() != (got == "") {
		t.Fatalf("NativeBF16 %v but BF16Missing %q", NativeBF16(), got)
	}
	if !NativeBF16() && !strings.Contains(got, "AMX_BF16") {
		t.Fatalf("BF16Missing %q does not name AMX_BF16", got)
	}
}

// TestSgemmBF16SerialEqualsParallel: the serial entry point gives the
// bits of the threaded one.
func TestSgemmBF16SerialEqualsParallel(t *testing.T) {
	const m, n, k = 130, 150, 70
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(i%17) - 8.25
	}
	for i := range b {
		b[i] = float32(i%13)*0.5 - 3
	}
	c1, c2 := make([]float32, m*n), make([]float32, m*n)
	SgemmBF16(false, false, m, n, k, 1, a, k, b, n, 0, c1, n)
	SgemmBF16Serial(false, false, m, n, k, 1, a, k, b, n, 0, c2, n)
	for i := range c1 {
		if c1[i] != c2[i] {
			t.Fatalf("c[%d]: SgemmBF16 %v, SgemmBF16Serial %v", i, c1[i], c2[i])
		}
	}
}
