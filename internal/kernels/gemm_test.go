package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// impls lists every SGEMM implementation this CPU can run, so the portable
// path is tested on amd64 too.
func impls() []*gemmImpl {
	out := []*gemmImpl{genericGemm}
	if gemm != genericGemm {
		out = append(out, allArchGemms()...)
	}
	return out
}

type gemmCase struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	pad            int // extra elements per row of A, B and C
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d alpha=%g beta=%g pad=%d", tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.pad)
}

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// checkGemm runs one case on impl with threads and compares every element of
// C with a float64 reference, relative to the magnitude of its terms, and
// checks that C's padding is untouched.
func checkGemm(t testing.TB, impl *gemmImpl, threads int, tc gemmCase, seed uint64) {
	t.Helper()
	checkGemmRun(t, impl.name, threads, tc, seed, nil, func(a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
		sgemmWith(impl, threads, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, nil, c, ldc)
	})
}

// checkGemmRun is checkGemm for any GEMM: gemm computes the case on the
// operands it is given, and round, if not nil, maps an operand to the
// values the reference multiplies (a bf16 GEMM's rounded ones). With
// beta 0, C starts as NaNs, which must not propagate.
func checkGemmRun(t testing.TB, name string, threads int, tc gemmCase, seed uint64, round func([]float32) []float32,
	gemm func(a []float32, lda int, b []float32, ldb int, c []float32, ldc int)) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(tc.m*1000003+tc.n*1009+tc.k)))
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = ac, ar
	}
	br, bc := tc.k, tc.n
	if tc.transB {
		br, bc = bc, br
	}
	lda, ldb, ldc := ac+tc.pad, bc+tc.pad, tc.n+tc.pad
	a := randSlice(r, max(ar*lda, 1))
	b := randSlice(r, max(br*ldb, 1))
	c := randSlice(r, max(tc.m*ldc, 1))
	if tc.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN())
		}
		// Padding must survive; make it finite so it is recognisable.
		for i := 0; i < tc.m; i++ {
			for j := tc.n; j < ldc; j++ {
				c[i*ldc+j] = 7
			}
		}
	}
	c0 := append([]float32(nil), c...)
	ra, rb := a, b
	if round != nil {
		ra, rb = round(a), round(b)
	}
	opA := func(i, p int) float64 {
		if tc.transA {
			return float64(ra[p*lda+i])
		}
		return float64(ra[i*lda+p])
	}
	opB := func(p, j int) float64 {
		if tc.transB {
			return float64(rb[j*ldb+p])
		}
		return float64(rb[p*ldb+j])
	}
	gemm(a, lda, b, ldb, c, ldc)
	tol := 1e-5 * math.Sqrt(float64(max(tc.k, 1)))
	bad := 0
	for i := 0; i < tc.m; i++ {
		for j := 0; j < ldc; j++ {
			got := c[i*ldc+j]
			if j >= tc.n {
				if math.Float32bits(got) != math.Float32bits(c0[i*ldc+j]) {
					t.Fatalf("%s %s: padding C[%d,%d] changed to %g", name, tc, i, j, got)
				}
				continue
			}
			var s, mag float64
			for p := 0; p < tc.k; p++ {
				x := opA(i, p) * opB(p, j)
				s += x
				mag += math.Abs(x)
			}
			want := float64(tc.alpha) * s
			scale := math.Abs(float64(tc.alpha)) * mag
			if tc.beta != 0 {
				want += float64(tc.beta) * float64(c0[i*ldc+j])
				scale += math.Abs(float64(tc.beta) * float64(c0[i*ldc+j]))
			}
			if d := math.Abs(float64(got) - want); !(d <= tol*scale+1e-30) {
				if bad < 3 {
					t.Errorf("%s threads=%d %s: C[%d,%d]=%g want %g (err %.3g, scale %.3g)", name, threads, tc, i, j, got, want, d, scale)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s threads=%d %s: %d wrong elements", name, threads, tc, bad)
	}
}

var trans = [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}}

func TestSgemmSmallSizes(t *testing.T) {
	sizes := []int{1, 3, 17, 64, 100}
	ab := [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {2, -1}}
	for _, impl := range impls() {
		n := 0
		for _, tr := range trans {
			for _, m := range sizes {
				for _, nn := range sizes {
					for _, k := range sizes {
						v := ab[n%len(ab)]
						n++
						tc := gemmCase{tr[0], tr[1], m, nn, k, v[0], v[1], n % 3 * 5}
						checkGemm(t, impl, 1, tc, 1)
					}
				}
			}
		}
	}
}

// TestSgemmThin covers every tile of the thin-C paths (dot-product tiles up
// to 4×5, the transposed product, the narrow kernel) in every transpose
// case, with k around the 16-float vector.
func TestSgemmThin(t *testing.T) {
	for _, impl := range impls() {
		for _, tr := range trans {
			for _, m := range []int{1, 2, 3, 4, 5, 7, 66} {
				for n := 1; n <= 16; n++ {
					for _, k := range []int{1, 16, 17, 100} {
						tc := gemmCase{tr[0], tr[1], m, n, k, 1.5, float32(n%2) * 0.5, (m + k) % 2 * 3}
						checkGemm(t, impl, 1, tc, 6)
					}
				}
			}
		}
	}
}

func TestSgemmLargeSizes(t *testing.T) {
	shapes := [][3]int{
		{257, 257, 257}, {1000, 17, 257}, {257, 1000, 64}, {64, 257, 1000},
		{3, 1000, 100}, {100, 3, 1000}, {1000, 64, 3}, {17, 100, 1000},
	}
	for _, impl := range impls() {
		for i, s := range shapes {
			for j, tr := range trans {
				tc := gemmCase{tr[0], tr[1], s[0], s[1], s[2], 1.5, float32(j%2) * 0.5, (i + j) % 2 * 3}
				checkGemm(t, impl, 1, tc, 2)
			}
		}
	}
}

// TestSgemmBlocking crosses every cache-block boundary (kc, mc, nc) and
// runs split over goroutines, with accumulation (beta=1) as backward does.
func TestSgemmBlocking(t *testing.T) {
	for _, impl := range impls() {
		m := impl.mc + impl.mr + 1
		k := impl.kc*2 + 3
		for _, tr := range trans {
			for _, threads := range []int{1, 2, 3} {
				checkGemm(t, impl, threads, gemmCase{tr[0], tr[1], m, 2*impl.nr + 5, k, 1, 1, 2}, 3)
				checkGemm(t, impl, threads, gemmCase{tr[0], tr[1], 9, 700, 300, -1, 0, 0}, 4)
			}
		}
		small := *impl
		small.nc = 2 * impl.nr
		checkGemm(t, &small, 1, gemmCase{false, true, 20, 5*impl.nr + 7, 40, 1, 0, 1}, 5)
	}
}

func TestSgemmDegenerate(t *testing.T) {
	for _, impl := range impls() {
		// k == 0: C = beta·C, and beta == 0 clears NaNs.
		c := []float32{float32(math.NaN()), 2, 3, 4}
		sgemmWith(impl, 1, false, false, 2, 2, 0, 1, nil, 1, nil, 2, 0, nil, c, 2)
		for _, v := range c {
			if v != 0 {
				t.Fatalf("%s k=0 beta=0: C=%v", impl.name, c)
			}
		}
		c = []float32{1, 2, 3, 4}
		sgemmWith(impl, 1, false, false, 2, 2, 0, 1, nil, 1, nil, 2, 2, nil, c, 2)
		if c[3] != 8 {
			t.Fatalf("%s k=0 beta=2: C=%v", impl.name, c)
		}
		// alpha == 0 ignores A and B even if they hold NaN.
		nan := float32(math.NaN())
		c = []float32{1, 1}
		sgemmWith(impl, 1, false, false, 1, 2, 1, 0, []float32{nan}, 1, []float32{nan, nan}, 2, 1, nil, c, 2)
		if c[0] != 1 || c[1] != 1 {
			t.Fatalf("%s alpha=0: C=%v", impl.name, c)
		}
	}
}

// TestSgemmPublic runs the exported entry points (default implementation,
// NumThreads goroutines) against the reference.
func TestSgemmPublic(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	m, n, k := 70, 130, 90
	a, b := randSlice(r, m*k), randSlice(r, n*k)
	c1, c2 := make([]float32, m*n), make([]float32, m*n)
	defer SetNumThreads(SetNumThreads(2))
	Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, c1, n)
	SgemmSerial(false, true, m, n, k, 1, a, k, b, k, 0, c2, n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var want, mag float64
			for p := 0; p < k; p++ {
				x := float64(a[i*k+p]) * float64(b[j*k+p])
				want += x
				mag += math.Abs(x)
			}
			for _, c := range [][]float32{c1, c2} {
				if d := math.Abs(float64(c[i*n+j]) - want); d > 1e-5*math.Sqrt(float64(k))*mag {
					t.Fatalf("C[%d,%d]=%g want %g", i, j, c[i*n+j], want)
				}
			}
		}
	}
}

func TestSgemmPanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	x := make([]float32, 6)
	mustPanic("short A", func() { Sgemm(false, false, 2, 2, 3, 1, x[:5], 3, x, 2, 0, x, 2) })
	mustPanic("small lda", func() { Sgemm(false, false, 2, 2, 3, 1, x, 2, x, 2, 0, x, 2) })
	mustPanic("negative", func() { Sgemm(false, false, -1, 2, 3, 1, x, 3, x, 2, 0, x, 2) })
}

func FuzzSgemm(f *testing.F) {
	f.Add(uint8(1), uint8(1), uint8(1), uint8(0), uint16(0))
	f.Add(uint8(17), uint8(49), uint8(33), uint8(3), uint16(1))
	f.Add(uint8(9), uint8(97), uint8(255), uint8(2), uint16(7))
	f.Fuzz(func(t *testing.T, m, n, k, tr uint8, seed uint16) {
		tc := gemmCase{tr&1 != 0, tr&2 != 0, int(m), int(n), int(k), 1, float32(tr>>2&1) * 0.5, int(seed % 3)}
		for _, impl := range impls() {
			checkGemm(t, impl, 1+int(seed%2), tc, uint64(seed))
		}
	})
}

// TestSgemmDeterministic checks that results do not depend on the thread
// count or on other goroutines calling Sgemm at the same time: every
// element is computed by the same kernel in the same order either way, so
// ranks with different thread counts stay bitwise in step.
func TestSgemmDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 2))
	shapes := [][3]int{{64, 512, 784}, {300, 40, 129}, {64, 10, 512}, {7, 1000, 33}}
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
			sgemmWith(gemm, 1, tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 1, nil, want, n)
			done := make(chan string, 4)
			for g := 0; g < 4; g++ {
				go func() {
					c := append([]float32(nil), c0...)
					sgemmWith(gemm, 1+g%3, tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 1, nil, c, n)
					for i := range c {
						if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
							done <- fmt.Sprintf("m=%d n=%d k=%d trans=%v threads=%d: C[%d]=%g, serial %g", m, n, k, tr, 1+g%3, i, c[i], want[i])
							return
						}
					}
					done <- ""
				}()
			}
			for g := 0; g < 4; g++ {
				if msg := <-done; msg != "" {
					t.Error(msg)
				}
			}
		}
	}
}

// TestSgemmBias checks SgemmBias against filling C with the bias rows and
// a beta-1 product, bit for bit, on every kernel set and path: register
// tiles and their row and column edges, the thin-C paths, k = 0, alpha =
// 0, a padded ldc and both thread counts. NaNs in C beforehand must not
// reach the result, since C is not read.
func TestSgemmBias(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 3))
	shapes := [][3]int{{64, 384, 128}, {13, 70, 9}, {300, 40, 129}, {64, 10, 512}, {100, 3, 20}, {5, 1000, 33}, {7, 8, 0}}
	for _, impl := range impls() {
		for _, s := range shapes {
			m, n, k := s[0], s[1], s[2]
			for _, tr := range trans {
				for _, alpha := range []float32{1, 0.5, 0} {
					for _, threads := range []int{1, 2} {
						lda, ldb, ldc := k, n, n+3
						if tr[0] {
							lda = m
						}
						if tr[1] {
							ldb = k
						}
						a, b, bias := randSlice(r, m*max(k, 1)), randSlice(r, max(k, 1)*n), randSlice(r, n)
						want := make([]float32, m*ldc)
						for i := range m {
							copy(want[i*ldc:i*ldc+n], bias)
						}
						sgemmWith(impl, threads, tr[0], tr[1], m, n, k, alpha, a, lda, b, ldb, 1, nil, want, ldc)
						c := make([]float32, m*ldc)
						for i := range c {
							c[i] = float32(math.NaN())
						}
						sgemmWith(impl, threads, tr[0], tr[1], m, n, k, alpha, a, lda, b, ldb, 1, bias, c, ldc)
						for i := range m {
							for j := range n {
								got, w := c[i*ldc+j], want[i*ldc+j]
								if math.Float32bits(got) != math.Float32bits(w) {
									t.Fatalf("%s m=%d n=%d k=%d trans=%v alpha=%g threads=%d: C[%d,%d] = %g, want %g",
										impl.name, m, n, k, tr, alpha, threads, i, j, got, w)
								}
							}
						}
					}
				}
			}
		}
	}
	if !panics(func() {
		SgemmBias(false, false, 2, 3, 1, 1, make([]float32, 2), 1, make([]float32, 3), 3, make([]float32, 2), make([]float32, 6), 3)
	}) {
		t.Error("SgemmBias with a short bias did not panic")
	}
}

// panics reports whether f panics.
func panics(f func()) (did bool) {
	defer func() { did = recover() != nil }()
	f()
	return false
}
