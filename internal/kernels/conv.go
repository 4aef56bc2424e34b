package kernels

import "fmt"

// Implicit-GEMM convolution: products whose operand rows are an image's
// rows shifted by each kernel tap, given as a table of offsets, so the
// im2col matrix is never written. The tile kernels are those of the AVX2
// SGEMM with one operand's rows looked up in the table (see
// gemmKernelOffsets in gen_asm.go).

// bOffKernel computes an mr×16 tile of C = alpha·A·B + beta·C, row p of B
// starting boff[p] bytes after b.
type bOffKernel func(k int, a *float32, aRow, aCol int, b *float32, boff *int, c *float32, ldc int, alpha, beta float32)

// aOffKernel computes an mr×16 tile of C = alpha·A·B + beta·C, row i of A
// starting aoff[i] bytes after a and contiguous along k; B is a packed
// micro-panel (bRow 16).
type aOffKernel func(k int, a *float32, aoff *int, b *float32, bRow int, c *float32, ldc int, alpha, beta float32)

// offsetGemm is the implicit-GEMM implementation: 6×16 tiles (and their
// row edges) and the blocking of the SGEMM they come from.
type offsetGemm struct {
	kc, mc int
	bOff   [7]bOffKernel
	aOff   [7]aOffKernel
	packBT func(dst, scratch, b []float32, ldb, p0, kc, j0, cols, nr int)
	// rowKern[r] is the SGEMM's kernel for r rows.
	rowKern [7]microKernel
	// packRows gathers k rows of 16 floats from their byte offsets.
	packRows func(dst, b *float32, boff *int, k int)
	// rowsBias is RowsBias's kernel on rows the caller has checked.
	rowsBias func(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, bias float32)
}

var packOffsetB = true

// offGemm is nil where the CPU has no such kernels.
var offGemm *offsetGemm

const offMR, offNR = 6, 16

// RowOffsets lists where each row of an operand starts, in elements from
// the start of its slice: an image's rows shifted by each kernel tap. A
// table is built once per convolution and serves every image.
type RowOffsets struct {
	bytes []int // the offsets ×4, as the kernels take them
	max   int   // the largest offset in elements
}

// NewRowOffsets returns the table of offsets elems (each at least 0).
func NewRowOffsets(elems []int) RowOffsets {
	t := RowOffsets{bytes: make([]int, len(elems))}
	for i, o := range elems {
		if o < 0 {
			panic(fmt.Sprintf("kernels: NewRowOffsets: row %d at negative offset %d", i, o))
		}
		t.bytes[i], t.max = 4*o, max(t.max, o)
	}
	return t
}

// Len is the number of rows.
func (t RowOffsets) Len() int { return len(t.bytes) }

// ImplicitConv reports whether SgemmOffsetB and SgemmOffsetA run on this
// CPU (amd64 with AVX2 and FMA whose SGEMM is the AVX2 one).
func ImplicitConv() bool { return offGemm != nil }

// OffsetBSlack is how many elements past the last one a product needs
// that SgemmOffsetB may read (and ignore) after each row of B: its tiles
// are 16 columns wide.
const OffsetBSlack = offNR - 1

// SgemmOffsetB computes C = A·B + beta·C on one goroutine, where A is
// m×k row-major (row stride lda), C is m×n (row stride ldc) and row p of
// B is b[rows[p] : rows[p]+n]. It reads up to OffsetBSlack elements past
// the end of each row of B, which b must hold. Each element is summed in
// the order of Sgemm's AVX2 products (k in blocks of 256), so it has
// their bits. It panics if ImplicitConv is false.
func SgemmOffsetB(m, n, k int, a []float32, lda int, b []float32, rows RowOffsets, beta float32, c []float32, ldc int) {
	og := offGemm
	if og == nil {
		panic("kernels: SgemmOffsetB: no implicit-GEMM kernels on this CPU (see ImplicitConv)")
	}
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if rows.Len() < k || lda < k || len(a) < (m-1)*lda+k || ldc < n || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("kernels: SgemmOffsetB: operands too short for %d×%d×%d", m, n, k))
	}
	if width := roundUp(n, offNR); rows.max+width > len(b) {
		panic(fmt.Sprintf("kernels: SgemmOffsetB: a B row at %d (+%d columns read) outside %d elements", rows.max, width, len(b)))
	}
	if packOffsetB {
		og.offsetBPacked(m, n, k, a, lda, b, rows, beta, c, ldc)
		return
	}
	offs := rows.bytes
	var tile [offMR * offNR]float32
	for pc := 0; pc < k; pc += og.kc {
		kc := min(og.kc, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		for ic := 0; ic < m; ic += og.mc {
			mc := min(og.mc, m-ic)
			for jr := 0; jr < n; jr += offNR {
				cols := min(offNR, n-jr)
				for ir := 0; ir < mc; ir += offMR {
					mrEff := min(offMR, mc-ir)
					kern := og.bOff[mrEff]
					ap := &a[(ic+ir)*lda+pc]
					ci := (ic+ir)*ldc + jr
					if cols == offNR {
						kern(kc, ap, lda, 1, &b[jr], &offs[pc], &c[ci], ldc, 1, betaEff)
						continue
					}
					kern(kc, ap, lda, 1, &b[jr], &offs[pc], &tile[0], offNR, 1, 0)
					mergeTile(tile[:], offNR, mrEff, cols, 1, betaEff, c[ci:], ldc)
				}
			}
		}
	}
}

// SgemmOffsetA computes C = A·Bᵀ + beta·C on one goroutine, where row i
// of the m×k matrix A is a[rows[i] : rows[i]+k], B is n×k row-major (row
// stride ldb) and C is m×n (row stride ldc). It panics if ImplicitConv is
// false.
func SgemmOffsetA(m, n, k int, a []float32, rows RowOffsets, b []float32, ldb int, beta float32, c []float32, ldc int) {
	og := offGemm
	if og == nil {
		panic("kernels: SgemmOffsetA: no implicit-GEMM kernels on this CPU (see ImplicitConv)")
	}
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if rows.Len() < m || ldb < k || len(b) < (n-1)*ldb+k || ldc < n || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("kernels: SgemmOffsetA: operands too short for %d×%d×%d", m, n, k))
	}
	if rows.max+k > len(a) {
		panic(fmt.Sprintf("kernels: SgemmOffsetA: an A row at %d (+%d) outside %d elements", rows.max, k, len(a)))
	}
	offs := rows.bytes
	ws := getWorkspace()
	defer putWorkspace(ws)
	kcMax := min(og.kc, k)
	ws.b = grow(ws.b, kcMax*roundUp(n, offNR))
	ws.scratch = grow(ws.scratch, 16*kcMax)
	var tile [offMR * offNR]float32
	for pc := 0; pc < k; pc += og.kc {
		kc := min(og.kc, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		for jr := 0; jr < n; jr += offNR {
			og.packBT(ws.b[jr*kc:(jr+offNR)*kc], ws.scratch, b, ldb, pc, kc, jr, min(offNR, n-jr), offNR)
		}
		for ic := 0; ic < m; ic += og.mc {
			mc := min(og.mc, m-ic)
			for jr := 0; jr < n; jr += offNR {
				cols := min(offNR, n-jr)
				bp := &ws.b[jr*kc]
				for ir := 0; ir < mc; ir += offMR {
					mrEff := min(offMR, mc-ir)
					kern := og.aOff[mrEff]
					ci := (ic+ir)*ldc + jr
					if cols == offNR {
						kern(kc, &a[pc], &offs[ic+ir], bp, offNR, &c[ci], ldc, 1, betaEff)
						continue
					}
					kern(kc, &a[pc], &offs[ic+ir], bp, offNR, &tile[0], offNR, 1, 0)
					mergeTile(tile[:], offNR, mrEff, cols, 1, betaEff, c[ci:], ldc)
				}
			}
		}
	}
}

// offsetBPacked is SgemmOffsetB packing each B micro-panel (kc×16) from
// the offsets into a contiguous buffer that stays in L1 while every A
// micro-panel runs over it with the SGEMM's own kernels.
func (og *offsetGemm) offsetBPacked(m, n, k int, a []float32, lda int, b []float32, rows RowOffsets, beta float32, c []float32, ldc int) {
	ws := getWorkspace()
	defer putWorkspace(ws)
	ws.b = grow(ws.b, min(og.kc, k)*offNR)
	pk := ws.b
	var tile [offMR * offNR]float32
	for pc := 0; pc < k; pc += og.kc {
		kc := min(og.kc, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		for jr := 0; jr < n; jr += offNR {
			cols := min(offNR, n-jr)
			og.packRows(&pk[0], &b[jr], &rows.bytes[pc], kc)
			for ir := 0; ir < m; ir += offMR {
				mrEff := min(offMR, m-ir)
				kern := og.rowKern[mrEff]
				ap := &a[ir*lda+pc]
				ci := ir*ldc + jr
				if cols == offNR {
					kern(kc, ap, lda, 1, &pk[0], offNR, &c[ci], ldc, 1, betaEff, allColumns)
					continue
				}
				kern(kc, ap, lda, 1, &pk[0], offNR, &tile[0], offNR, 1, 0, allColumns)
				mergeTile(tile[:], offNR, mrEff, cols, 1, betaEff, c[ci:], ldc)
			}
		}
	}
}

// RowsBias sets dst[r·dstStride+j] = src[r·srcStride+j] + bias for r <
// rows, j < cols: a convolution's wanted columns out of its implicit
// product, with the bias rounded in as Axpy(bias, ones, y) would.
func RowsBias(dst []float32, dstStride int, src []float32, srcStride int, rows, cols int, bias float32) {
	if rows <= 0 || cols <= 0 {
		return
	}
	if dstStride < cols || srcStride < cols || len(dst) < (rows-1)*dstStride+cols || len(src) < (rows-1)*srcStride+cols {
		panic(fmt.Sprintf("kernels: RowsBias: %d rows of %d do not fit", rows, cols))
	}
	if og := offGemm; og != nil {
		og.rowsBias(&dst[0], dstStride, &src[0], srcStride, rows, cols, bias)
		return
	}
	for r := range rows {
		d, s := dst[r*dstStride:][:cols], src[r*srcStride:][:cols]
		for j, v := range s {
			d[j] = v + bias
		}
	}
}

// CopyRows sets dst[r·dstStride+j] = src[r·srcStride+j] for r < rows,
// j < cols (add false) or adds to it (add true), with vector kernels.
func CopyRows(add bool, dst []float32, dstStride int, src []float32, srcStride int, rows, cols int) {
	if rows > 0 && cols > 0 && (dstStride < cols || srcStride < cols) {
		panic(fmt.Sprintf("kernels: CopyRows: strides %d, %d below %d columns", dstStride, srcStride, cols))
	}
	copyRows(add, dst, dstStride, src, srcStride, rows, cols)
}
