package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// uniformSlice returns n uniform values in [−1, 1).
func uniformSlice(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*rng.Float32() - 1
	}
	return x
}

// closeTo fails unless got and want agree to float32 rounding of sums
// of k products of magnitude ≤ 1.
func closeTo(t *testing.T, what string, got, want []float32, k int) {
	t.Helper()
	tol := 3e-6 * float64(k+1)
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: element %d = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// eachOffGemm runs f with each implicit-GEMM implementation this CPU
// has (AVX2's 6×16 tiles and AVX-512's 6×64) in use, or skips.
func eachOffGemm(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if len(offGemms) == 0 {
		t.Skip("no implicit-GEMM kernels on this CPU")
	}
	defer func(og *offsetGemm) { offGemm = og }(offGemm)
	for _, og := range offGemms {
		offGemm = og
		t.Run(og.name, f)
	}
}

// TestSgemmOffsetB checks the B-offset product against the plain loop at
// sizes with row edges (7 and 8 rows go as 4+3 and 4+4), column edges, k
// past one and two blocks, and both betas; the C columns beyond n (the
// row padding of ldc) are checked untouched too.
func TestSgemmOffsetB(t *testing.T) {
	eachOffGemm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, sz := range [][3]int{{1, 1, 1}, {6, 16, 4}, {7, 17, 9}, {8, 33, 321}, {14, 16, 640}, {64, 622, 288}, {32, 676, 576}, {150, 35, 300}, {5, 3, 513}} {
			m, n, k := sz[0], sz[1], sz[2]
			for _, beta := range []float32{0, 1} {
				lda, ldc := k+3, n+5
				a := uniformSlice(rng, m*lda)
				b := uniformSlice(rng, 4*k+n+n*k/2+OffsetBSlack)
				offs := make([]int, k)
				for p := range offs {
					offs[p] = rng.IntN(len(b) - n - OffsetBSlack + 1)
				}
				c := uniformSlice(rng, m*ldc)
				want := append([]float32(nil), c...)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var s float64
						for p := 0; p < k; p++ {
							s += float64(a[i*lda+p]) * float64(b[offs[p]+j])
						}
						want[i*ldc+j] = float32(s) + beta*want[i*ldc+j]
					}
				}
				SgemmOffsetB(m, n, k, a, lda, b, NewRowOffsets(offs), beta, c, ldc)
				closeTo(t, "SgemmOffsetB", c, want, k)
			}
		}
	})
}

// TestSgemmOffsetBounds checks that operands too short for the product
// are refused before any kernel reads them.
func TestSgemmOffsetBounds(t *testing.T) {
	eachOffGemm(t, func(t *testing.T) {
		mustPanic := func(name string, f func()) {
			t.Helper()
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}
		a, c := make([]float32, 4*8), make([]float32, 4*20)
		mustPanic("B without slack", func() {
			SgemmOffsetB(4, 20, 8, a, 8, make([]float32, 20+8), NewRowOffsets([]int{0, 1, 2, 3, 4, 5, 6, 8}), 0, c, 20)
		})
		mustPanic("A row past the end", func() {
			SgemmAddOffsetASegments(4, 20, 2, 4, 5, a, NewRowOffsets([]int{0, 1, 2, 25}), make([]float32, 20*8), 8, c, 20)
		})
		mustPanic("C row past the end", func() {
			SgemmAddOffsetC(4, 20, 8, a, 8, make([]float32, 8*20), 20, c, NewRowOffsets([]int{0, 1, 2, 61}))
		})
		mustPanic("negative offset", func() { NewRowOffsets([]int{-1}) })
	})
}

// TestRowsBias checks the strided copy with bias, odd widths and the
// vector/tail split included, against the loop, bit for bit.
func TestRowsBias(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, cols := range []int{1, 7, 8, 9, 24, 26, 33} {
		rows, ss, ds := 5, cols+3, cols+1
		src := uniformSlice(rng, rows*ss)
		dst := uniformSlice(rng, rows*ds)
		want := append([]float32(nil), dst...)
		for r := range rows {
			for j := range cols {
				want[r*ds+j] = src[r*ss+j] + 0.37
			}
		}
		RowsBias(dst, ds, src, ss, rows, cols, 0.37)
		for i := range want {
			if dst[i] != want[i] {
				t.Fatalf("cols %d: element %d = %v, want %v", cols, i, dst[i], want[i])
			}
		}
	}
}

// TestSgemmOffsetBGrid checks the grid product against the plain loop:
// segments of 16 to 26 columns every 16 to 30, panels inside one
// segment and across two, n not a multiple of the segment.
func TestSgemmOffsetBGrid(t *testing.T) {
	eachOffGemm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		for _, sz := range [][5]int{{64, 576, 288, 24, 26}, {32, 676, 9, 26, 28}, {7, 50, 20, 16, 16}, {13, 61, 300, 17, 30}, {8, 1, 5, 20, 23}} {
			m, n, k, seg, stride := sz[0], sz[1], sz[2], sz[3], sz[4]
			for _, beta := range []float32{0, 1} {
				lda, ldc := k+1, n+2
				a := uniformSlice(rng, m*lda)
				span := (n-1)/seg*stride + seg + 16
				b := uniformSlice(rng, 3*k+span)
				offs := make([]int, k)
				for p := range offs {
					offs[p] = rng.IntN(len(b) - span + 1)
				}
				c := uniformSlice(rng, m*ldc)
				want := append([]float32(nil), c...)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var s float64
						for p := 0; p < k; p++ {
							s += float64(a[i*lda+p]) * float64(b[offs[p]+j/seg*stride+j%seg])
						}
						want[i*ldc+j] = float32(s) + beta*want[i*ldc+j]
					}
				}
				SgemmOffsetBGrid(m, n, k, a, lda, b, NewRowOffsets(offs), seg, stride, beta, c, ldc)
				closeTo(t, "SgemmOffsetBGrid", c, want, k)
			}
		}
	})
}

// BenchmarkConvProducts times the implicit products of the CNN's second
// convolution (one 32×26×26 image, 64 3×3 filters) against Sgemm on the
// equivalent im2col shapes, alternately: `go test -run XXX -bench
// ConvProducts ./internal/kernels`. GFLOP/s counts the useful work.
func BenchmarkConvProducts(b *testing.B) {
	if !ImplicitConv() {
		b.Skip("no implicit-GEMM kernels on this CPU")
	}
	defer SetNumThreads(SetNumThreads(1))
	const c, h, w, o, kh = 32, 26, 26, 64, 3
	const oh, ow, ckk, p = h - kh + 1, w - kh + 1, c * kh * kh, (h - kh + 1) * (w - kh + 1)
	rng := rand.New(rand.NewPCG(11, 12))
	img := uniformSlice(rng, c*h*w+OffsetBSlack)
	wt := uniformSlice(rng, o*ckk)
	col := uniformSlice(rng, ckk*p)
	g := uniformSlice(rng, o*p)
	out := make([]float32, o*p)
	dcol := make([]float32, ckk*p)
	dw := make([]float32, ckk*o)
	offs := make([]int, 0, ckk)
	for ci := range c {
		for i := range kh {
			for j := range kh {
				offs = append(offs, ci*h*w+i*w+j)
			}
		}
	}
	taps := NewRowOffsets(offs)
	cols := (oh-1)*w + ow
	gp := uniformSlice(rng, o*cols)
	// The input gradient: the column gradient [(i, j, c), o]·G' added
	// into the image at each row's tap.
	ctapOffs := make([]int, 0, ckk)
	for i := range kh {
		for j := range kh {
			for ci := range c {
				ctapOffs = append(ctapOffs, ci*h*w+i*w+j)
			}
		}
	}
	ctaps := NewRowOffsets(ctapOffs)
	dx := make([]float32, c*h*w)
	flops := float64(2 * o * ckk * p)
	cases := []struct {
		name string
		f    func()
	}{
		{"forward/im2col-sgemm", func() { SgemmSerial(false, false, o, p, ckk, 1, wt, ckk, col, p, 0, out, p) }},
		{"forward/implicit", func() { SgemmOffsetBGrid(o, p, ckk, wt, ckk, img, taps, ow, w, 0, out, p) }},
		{"weightgrad/im2col-sgemm", func() { SgemmSerial(false, true, ckk, o, p, 1, col, p, g, p, 1, dw, o) }},
		{"weightgrad/implicit", func() { SgemmAddOffsetASegments(ckk, o, oh, ow, w, img, taps, g, p, dw, o) }},
		{"inputgrad/im2col-sgemm(col2im not included)", func() { SgemmSerial(true, false, ckk, p, o, 1, wt, ckk, g, p, 0, dcol, p) }},
		{"inputgrad/implicit", func() { SgemmAddOffsetC(ckk, cols, o, wt, o, gp, cols, dx, ctaps) }},
	}
	for round := range 3 {
		for _, cs := range cases {
			b.Run(fmt.Sprintf("%s/%d", cs.name, round), func(b *testing.B) {
				for b.Loop() {
					cs.f()
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestSgemmAddOffsetC checks the C-offset product against the plain loop,
// with overlapping C rows (added in turn), row and column edges and k
// past one block.
func TestSgemmAddOffsetC(t *testing.T) {
	eachOffGemm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 14))
		for _, sz := range [][3]int{{1, 1, 1}, {6, 16, 4}, {7, 17, 9}, {8, 40, 64}, {288, 622, 64}, {13, 33, 321}} {
			m, n, k := sz[0], sz[1], sz[2]
			lda, ldb := k+1, n+3
			a, b := uniformSlice(rng, m*lda), uniformSlice(rng, k*ldb)
			c := uniformSlice(rng, 2*n+m)
			offs := make([]int, m)
			for i := range offs {
				offs[i] = rng.IntN(len(c) - n + 1)
			}
			want := make([]float64, len(c))
			for i, v := range c {
				want[i] = float64(v)
			}
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var s float64
					for p := 0; p < k; p++ {
						s += float64(a[i*lda+p]) * float64(b[p*ldb+j])
					}
					want[offs[i]+j] += s
				}
			}
			SgemmAddOffsetC(m, n, k, a, lda, b, ldb, c, NewRowOffsets(offs))
			w32 := make([]float32, len(want))
			for i, v := range want {
				w32[i] = float32(v)
			}
			closeTo(t, "SgemmAddOffsetC", c, w32, k+m)
		}
	})
}

// TestSgemmAddOffsetASegments checks the segmented A-offset product
// against the plain loop: segments shorter and longer than a k block,
// row and column edges.
func TestSgemmAddOffsetASegments(t *testing.T) {
	eachOffGemm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(15, 16))
		for _, sz := range [][5]int{{1, 1, 1, 1, 1}, {288, 64, 24, 24, 26}, {9, 32, 26, 26, 28}, {7, 17, 5, 3, 7}, {13, 40, 3, 330, 331}, {8, 16, 40, 9, 9}} {
			m, n, segs, seg, stride := sz[0], sz[1], sz[2], sz[3], sz[4]
			k := segs * seg
			ldb, ldc := k+1, n+2
			a := uniformSlice(rng, 2*m+(segs-1)*stride+seg)
			offs := make([]int, m)
			for i := range offs {
				offs[i] = rng.IntN(len(a) - (segs-1)*stride - seg + 1)
			}
			b := uniformSlice(rng, n*ldb)
			c := uniformSlice(rng, m*ldc)
			want := append([]float32(nil), c...)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var s float64
					for q := 0; q < k; q++ {
						s += float64(a[offs[i]+q/seg*stride+q%seg]) * float64(b[j*ldb+q])
					}
					want[i*ldc+j] += float32(s)
				}
			}
			SgemmAddOffsetASegments(m, n, segs, seg, stride, a, NewRowOffsets(offs), b, ldb, c, ldc)
			closeTo(t, "SgemmAddOffsetASegments", c, want, k)
		}
	})
}

// TestImplicitProductsEdges sweeps the four implicit products over every
// tile height up to 8 rows (6, and 7 and 8 as 4+3 and 4+4), widths on
// both sides of the 16- and 64-column panels and k tails (1 to 5 steps
// past the unrolled loop's 4, one past a k block), with each
// implementation, against the plain loops.
func TestImplicitProductsEdges(t *testing.T) {
	eachOffGemm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(21, 22))
		for m := 1; m <= 8; m++ {
			for _, n := range []int{1, 15, 16, 17, 33, 63, 64, 65, 100, 129} {
				for _, k := range []int{1, 2, 3, 5, 7, 330} {
					checkOffsetB(t, rng, m, n, k)
					checkOffsetBGrid(t, rng, m, n, k)
					checkAddOffsetC(t, rng, m, n, k)
					checkAddOffsetASegments(t, rng, m, n, k)
				}
			}
		}
	})
}

func checkOffsetB(t *testing.T, rng *rand.Rand, m, n, k int) {
	t.Helper()
	lda, ldc := k+1, n+3
	a, c := uniformSlice(rng, m*lda), uniformSlice(rng, m*ldc)
	b := uniformSlice(rng, 2*k+n+OffsetBSlack)
	offs := make([]int, k)
	for p := range offs {
		offs[p] = rng.IntN(len(b) - n - OffsetBSlack + 1)
	}
	want := append([]float32(nil), c...)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += float64(a[i*lda+p]) * float64(b[offs[p]+j])
			}
			want[i*ldc+j] = float32(s) + 0.5*want[i*ldc+j]
		}
	}
	SgemmOffsetB(m, n, k, a, lda, b, NewRowOffsets(offs), 0.5, c, ldc)
	closeTo(t, fmt.Sprintf("SgemmOffsetB %d×%d×%d", m, n, k), c, want, k)
}

func checkOffsetBGrid(t *testing.T, rng *rand.Rand, m, n, k int) {
	t.Helper()
	seg, stride := 16+rng.IntN(12), 30
	lda, ldc := k+1, n+3
	a, c := uniformSlice(rng, m*lda), uniformSlice(rng, m*ldc)
	span := (n-1)/seg*stride + seg + 16
	b := uniformSlice(rng, 2*k+span)
	offs := make([]int, k)
	for p := range offs {
		offs[p] = rng.IntN(len(b) - span + 1)
	}
	want := append([]float32(nil), c...)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += float64(a[i*lda+p]) * float64(b[offs[p]+j/seg*stride+j%seg])
			}
			want[i*ldc+j] = float32(s)
		}
	}
	SgemmOffsetBGrid(m, n, k, a, lda, b, NewRowOffsets(offs), seg, stride, 0, c, ldc)
	closeTo(t, fmt.Sprintf("SgemmOffsetBGrid %d×%d×%d seg %d", m, n, k, seg), c, want, k)
}

func checkAddOffsetC(t *testing.T, rng *rand.Rand, m, n, k int) {
	t.Helper()
	lda, ldb := k+1, n+2
	a, b := uniformSlice(rng, m*lda), uniformSlice(rng, k*ldb)
	c := uniformSlice(rng, n+2*m)
	offs := make([]int, m)
	for i := range offs {
		offs[i] = rng.IntN(len(c) - n + 1)
	}
	want := make([]float64, len(c))
	for i, v := range c {
		want[i] = float64(v)
	}
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += float64(a[i*lda+p]) * float64(b[p*ldb+j])
			}
			want[offs[i]+j] += s
		}
	}
	SgemmAddOffsetC(m, n, k, a, lda, b, ldb, c, NewRowOffsets(offs))
	w32 := make([]float32, len(want))
	for i, v := range want {
		w32[i] = float32(v)
	}
	closeTo(t, fmt.Sprintf("SgemmAddOffsetC %d×%d×%d", m, n, k), c, w32, k+m)
}

func checkAddOffsetASegments(t *testing.T, rng *rand.Rand, m, n, k int) {
	t.Helper()
	// k as segments: k itself, or 2 or 3 segments when it divides.
	segs := 1
	for _, s := range []int{3, 2} {
		if k%s == 0 && k > s {
			segs = s
			break
		}
	}
	seg := k / segs
	stride := seg + 2
	ldb, ldc := k+1, n+3
	a := uniformSlice(rng, 2*m+(segs-1)*stride+seg)
	offs := make([]int, m)
	for i := range offs {
		offs[i] = rng.IntN(len(a) - (segs-1)*stride - seg + 1)
	}
	b, c := uniformSlice(rng, n*ldb), uniformSlice(rng, m*ldc)
	want := append([]float32(nil), c...)
	for i := range m {
		for j := range n {
			var s float64
			for q := range k {
				s += float64(a[offs[i]+q/seg*stride+q%seg]) * float64(b[j*ldb+q])
			}
			want[i*ldc+j] += float32(s)
		}
	}
	SgemmAddOffsetASegments(m, n, segs, seg, stride, a, NewRowOffsets(offs), b, ldb, c, ldc)
	closeTo(t, fmt.Sprintf("SgemmAddOffsetASegments %d×%d×%d (%d segments)", m, n, k, segs), c, want, k)
}
