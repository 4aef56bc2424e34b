package kernels

import "fmt"

// Implicit-GEMM convolution: products whose operand rows are an image's
// rows shifted by each kernel tap, given as a table of offsets, so the
// im2col matrix is never written. SgemmOffsetB gathers each B micro-panel
// (16 columns wide with AVX2, 64 with AVX-512) from the table into a
// buffer and runs the SGEMM's own kernels on it (SgemmOffsetBGrid also
// skipping columns); SgemmAddOffsetASegments reads A's rows in place,
// and SgemmAddOffsetC adds into C's rows in place, through kernels of
// their own (gemmKernelASegments and gemmKernelCOffsets in gen_asm.go).

// aSegKernel adds an mr×nr tile of A·B into C (row stride ldc): row i of
// A starts aoff[i] bytes after a and runs in segs segments of seg floats,
// skip floats apart; B is a packed micro-panel of segs·seg steps. Masked
// kernels store only the columns masks selects (as microKernel's).
type aSegKernel func(segs, seg, skip int, a *float32, aoff *int, b *float32, c *float32, ldc int, masks uint64)

// cOffKernel adds an mr×nr tile of A·B into C, row i of C starting
// coff[i] bytes after c; A is read in place along k (row stride aRow), B
// is a packed micro-panel; masks as aSegKernel's.
type cOffKernel func(k int, a *float32, aRow int, b *float32, c *float32, coff *int, masks uint64)

// offsetGemm is an implicit-GEMM implementation: 6×nr tiles (and their
// row edges) and the SGEMM's kernels of the same width.
type offsetGemm struct {
	name   string
	nr     int  // tile columns: 16 (AVX2) or 64 (AVX-512)
	maxKC  int  // the longest k block (see blockK)
	masked bool // the kernels store only the columns their masks select
	mc     int  // rows of A per block, as the SGEMM's
	cOff   [7]cOffKernel
	aSeg   [7]aSegKernel
	packBT func(dst, scratch, b []float32, ldb, p0, kc, j0, cols, nr int)
	// rowKern[r] is the SGEMM's kernel for r rows.
	rowKern [7]microKernel
	// packRows gathers k rows of 16 floats from their byte offsets (nr 16).
	packRows func(dst, b *float32, boff *int, k int)
	// packRows2 is packRows with lane l from p1 where mask[l] ≥ 0, else
	// from p2 (nr 16).
	packRows2 func(dst, p1, p2 *float32, boff *int, k int, mask *int32)
	// packChunks gathers k rows of 64 floats in chunks of 16 from their
	// byte offsets, each chunk from one or two places (nr 64; see
	// packOffsetChunksKernel in gen_asm.go).
	packChunks func(dst, b *float32, boff *int, k int, chunks *int)
	// narrow, if set, replaces this implementation in
	// SgemmAddOffsetASegments when C has at most nr/2 columns (a weight
	// gradient of 32 channels would leave half of each 64-column tile
	// idle).
	narrow *offsetGemm
	// rowsBias is RowsBias's kernel on rows the caller has checked.
	rowsBias func(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int, bias float32)
}

// offGemm is the implementation in use, nil where the CPU has no such
// kernels; offGemms lists every one the CPU can run (for the tests).
var (
	offGemm  *offsetGemm
	offGemms []*offsetGemm
)

// offMR is the tiles' height; offChunk is the width B rows are read in
// (a 16-column panel, or a chunk of a 64-column one), which sets the
// slack past a row the products may read.
const offMR, offChunk = 6, 16

// colMask is the column mask of a tile of cols ≤ 64 columns.
func colMask(cols int) uint64 {
	if cols >= 64 {
		return allColumns
	}
	return 1<<uint(cols) - 1
}

// packPanel gathers the kc×nr B micro-panel at columns jr… (of n) into
// pk, row p from boff[p] bytes after b: column q at element q, or, with
// seg > 0, at (q/seg)·segStride + q%seg. Each 16 columns read 16
// elements from their first one on, or, where they cross into the next
// segment after l, 16−l from its start too: the reads the callers check.
// The kernels' tables are built in sc, one per product: the kernels are
// called through func values, so a local table would be allocated at
// every panel.
func (og *offsetGemm) packPanel(sc *panelScratch, pk, b []float32, boff *int, kc, n, jr, seg, segStride int) {
	// where returns chunk jc's first element, and the start and first
	// lane of its continuation in the next segment (lane 16 if none).
	where := func(jc int) (s1, s2, l int) {
		if seg == 0 {
			return jc, jc, offChunk
		}
		y, x0 := jc/seg, jc%seg
		s1 = y*segStride + x0
		if l = seg - x0; l >= min(offChunk, n-jc) {
			return s1, s1, offChunk
		}
		// Lanes l.. continue at the next segment's start: read from there
		// shifted back by l (never before b's start, as l < 16 ≤
		// segStride).
		return s1, (y+1)*segStride - l, l
	}
	if og.nr == offChunk {
		s1, s2, l := where(jr)
		if l == offChunk {
			og.packRows(&pk[0], &b[s1], boff, kc)
			return
		}
		mask := &sc.mask
		for i := range mask {
			mask[i] = 0
			if i >= l {
				mask[i] = -1
			}
		}
		og.packRows2(&pk[0], &b[s1], &b[s2], boff, kc, &mask[0])
		return
	}
	// Chunks past n repeat the first chunk's reads (their lanes are not
	// stored).
	ch := &sc.ch
	for c := range 4 {
		jc := jr + offChunk*c
		if jc >= n {
			ch[c], ch[4+c], ch[8+c] = ch[0], ch[4], ch[8]
			continue
		}
		s1, s2, l := where(jc)
		ch[c], ch[4+c], ch[8+c] = 4*s1, 4*s2, 0xffff&^(1<<uint(l)-1)
	}
	og.packChunks(&pk[0], &b[0], boff, kc, &ch[0])
}

// panelScratch holds packPanel's tables for the packing kernels.
type panelScratch struct {
	ch   [12]int
	mask [offChunk]int32
}

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

// ImplicitConv reports whether the implicit-GEMM products (SgemmOffsetB
// and the others) run on this CPU: amd64 with AVX2 and FMA, in 6×64
// tiles on the AVX-512 SGEMM's kernels where it has AVX-512, else in
// 6×16 tiles on the AVX2 one's.
func ImplicitConv() bool { return offGemm != nil }

// OffsetBSlack is how many elements past the last one a product needs
// that SgemmOffsetB may read (and ignore) after each row of B: B's rows
// are read 16 columns at a time.
const OffsetBSlack = offChunk - 1

// SgemmOffsetB computes C = A·B + beta·C on one goroutine, where A is
// m×k row-major (row stride lda), C is m×n (row stride ldc) and row p of
// B is b[rows[p] : rows[p]+n]. It reads up to OffsetBSlack elements past
// the end of each row of B, which b must hold. Each element is one FMA
// chain over k in blocks of offGemm.blockK(k). It panics if ImplicitConv is
// false.
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
	if width := roundUp(n, offChunk); rows.max+width > len(b) {
		panic(fmt.Sprintf("kernels: SgemmOffsetB: a B row at %d (+%d columns read) outside %d elements", rows.max, width, len(b)))
	}
	og.offsetBPacked(m, n, k, a, lda, b, rows, beta, c, ldc)
}

// blockK is the k block of the implicit products: at most og.maxKC steps
// (320 for AVX2: a packed 16-column B panel of 20 KiB stays in L1 beside
// A's rows), split evenly, so that a convolution's 288 or 576 steps are
// not cut into 256 and a short remainder whose tiles would pay their
// fixed cost (C's loads and stores, the call) over few steps.
func (og *offsetGemm) blockK(k int) int {
	blocks := (k + og.maxKC - 1) / og.maxKC
	return (k + blocks - 1) / blocks
}

// tileRows is the height of the next tile when rows remain: 6, except
// that 7 and 8 go as 4 then 3 or 4: a 1- or 2-row tile has too few
// accumulators to hide the FMA latency and runs at half speed or less.
func tileRows(rows int) int {
	if rows == 7 || rows == 8 {
		return 4
	}
	return min(offMR, rows)
}

// offsetBPacked is SgemmOffsetB on checked operands.
func (og *offsetGemm) offsetBPacked(m, n, k int, a []float32, lda int, b []float32, rows RowOffsets, beta float32, c []float32, ldc int) {
	og.panels(m, n, k, a, lda, b, rows, 0, 0, beta, c, ldc)
}

// panels runs SgemmOffsetB (seg 0) or SgemmOffsetBGrid on checked
// operands: each B micro-panel packed from the offsets into a contiguous
// buffer that every A micro-panel then runs over with the SGEMM's own
// kernels.
func (og *offsetGemm) panels(m, n, k int, a []float32, lda int, b []float32, rows RowOffsets, seg, segStride int, beta float32, c []float32, ldc int) {
	nr := og.nr
	ws := getWorkspace()
	defer putWorkspace(ws)
	kcMax := og.blockK(k)
	ws.b = grow(ws.b, kcMax*nr)
	pk := ws.b
	// The edge tile lives in the workspace: a local array would escape
	// (the kernels are called through func values) and be allocated.
	ws.tile = grow(ws.tile, offMR*nr)
	tile := ws.tile
	sc := new(panelScratch)
	for pc := 0; pc < k; pc += kcMax {
		kc := min(kcMax, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		for jr := 0; jr < n; jr += nr {
			cols := min(nr, n-jr)
			og.packPanel(sc, pk, b, &rows.bytes[pc], kc, n, jr, seg, segStride)
			for ir := 0; ir < m; {
				mrEff := tileRows(m - ir)
				kern := og.rowKern[mrEff]
				ap := &a[ir*lda+pc]
				ci := ir*ldc + jr
				if cols == nr || og.masked {
					kern(kc, ap, lda, 1, &pk[0], nr, &c[ci], ldc, 1, betaEff, colMask(cols))
				} else {
					kern(kc, ap, lda, 1, &pk[0], nr, &tile[0], nr, 1, 0, allColumns)
					mergeTile(tile, nr, mrEff, cols, 1, betaEff, c[ci:], ldc)
				}
				ir += mrEff
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

// OffsetBGridMinSeg is the shortest segment SgemmOffsetBGrid takes: a
// 16-column panel then spans at most two segments.
const OffsetBGridMinSeg = offChunk

// SgemmOffsetBGrid is SgemmOffsetB with B's columns on a grid: column q
// of row p is b[rows[p] + (q/seg)·segStride + q%seg], seg ≥
// OffsetBGridMinSeg columns out of every segStride (a convolution's output rows of ow pixels on
// input rows of wp). It reads up to 15 elements past each segment's last
// wanted one, which b must hold after the last.
func SgemmOffsetBGrid(m, n, k int, a []float32, lda int, b []float32, rows RowOffsets, seg, segStride int, beta float32, c []float32, ldc int) {
	og := offGemm
	if og == nil {
		panic("kernels: SgemmOffsetBGrid: no implicit-GEMM kernels on this CPU (see ImplicitConv)")
	}
	if seg < OffsetBGridMinSeg || segStride < seg {
		panic(fmt.Sprintf("kernels: SgemmOffsetBGrid: segments of %d every %d (want 16 ≤ seg ≤ stride)", seg, segStride))
	}
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if rows.Len() < k || lda < k || len(a) < (m-1)*lda+k || ldc < n || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("kernels: SgemmOffsetBGrid: operands too short for %d×%d×%d", m, n, k))
	}
	// A panel reads 16 elements from its first column on, and one that
	// runs into the next segment 16 more, ending 16−l past its start.
	end := 0
	for jr := 0; jr < n; jr += offChunk {
		y, x0 := jr/seg, jr%seg
		end = max(end, y*segStride+x0+offChunk)
		if l := seg - x0; l < min(offChunk, n-jr) {
			end = max(end, (y+1)*segStride+offChunk-l)
		}
	}
	if rows.max+end > len(b) {
		panic(fmt.Sprintf("kernels: SgemmOffsetBGrid: B reads up to %d, outside %d elements", rows.max+end, len(b)))
	}
	og.panels(m, n, k, a, lda, b, rows, seg, segStride, beta, c, ldc)
}

// SgemmAddOffsetC adds A·B into C on one goroutine, where A is m×k
// row-major (row stride lda), B is k×n row-major (row stride ldb) and row
// i of C is c[rows[i] : rows[i]+n]. Rows of C may overlap (a column
// gradient's rows folded back into one image): they are added in turn.
// It panics if ImplicitConv is false.
func SgemmAddOffsetC(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, rows RowOffsets) {
	og := offGemm
	if og == nil {
		panic("kernels: SgemmAddOffsetC: no implicit-GEMM kernels on this CPU (see ImplicitConv)")
	}
	if m <= 0 || n <= 0 || k <= 0 {
		return
	}
	if rows.Len() < m || lda < k || len(a) < (m-1)*lda+k || ldb < n || len(b) < (k-1)*ldb+n || rows.max+n > len(c) {
		panic(fmt.Sprintf("kernels: SgemmAddOffsetC: operands too short for %d×%d×%d", m, n, k))
	}
	nr := og.nr
	ws := getWorkspace()
	defer putWorkspace(ws)
	kcMax := og.blockK(k)
	ws.b = grow(ws.b, kcMax*nr)
	pk := ws.b
	// The edge tile lives in the workspace: a local array would escape
	// (the kernels are called through func values) and be allocated.
	ws.tile = grow(ws.tile, offMR*nr)
	tile := ws.tile
	// B's rows as byte offsets, so that whole panels are gathered by the
	// packing kernel rather than a copy call per row.
	brows := make([]int, k)
	sc := new(panelScratch)
	for p := range brows {
		brows[p] = 4 * p * ldb
	}
	for pc := 0; pc < k; pc += kcMax {
		kc := min(kcMax, k-pc)
		for jr := 0; jr < n; jr += nr {
			cols := min(nr, n-jr)
			if cols == nr {
				og.packPanel(sc, pk, b, &brows[pc], kc, n, jr, 0, 0)
			} else {
				packBNoTrans(pk, b, ldb, pc, kc, jr, cols, nr)
			}
			for ir := 0; ir < m; {
				mrEff := tileRows(m - ir)
				ap := &a[ir*lda+pc]
				if cols == nr || og.masked {
					og.cOff[mrEff](kc, ap, lda, &pk[0], &c[jr], &rows.bytes[ir], colMask(cols))
				} else {
					og.rowKern[mrEff](kc, ap, lda, 1, &pk[0], nr, &tile[0], nr, 1, 0, allColumns)
					for i := range mrEff {
						dst := c[rows.bytes[ir+i]/4+jr:][:cols]
						for j := range dst {
							dst[j] += tile[i*nr+j]
						}
					}
				}
				ir += mrEff
			}
		}
	}
}

// SgemmAddOffsetASegments adds A·Bᵀ into C on one goroutine, where A is
// m×k with k = segs·seg: row i's step q is a[rows[i] + (q/seg)·stride +
// q%seg] (a convolution's output pixels, row by row, on input rows of
// stride ≥ seg), B is n×k row-major (row stride ldb) and C is m×n (row
// stride ldc). It panics if ImplicitConv is false.
func SgemmAddOffsetASegments(m, n, segs, seg, stride int, a []float32, rows RowOffsets, b []float32, ldb int, c []float32, ldc int) {
	og := offGemm
	if og == nil {
		panic("kernels: SgemmAddOffsetASegments: no implicit-GEMM kernels on this CPU (see ImplicitConv)")
	}
	if og.narrow != nil && 2*n <= og.nr {
		og = og.narrow
	}
	k := segs * seg
	if m <= 0 || n <= 0 || k <= 0 {
		return
	}
	if seg < 1 || stride < seg {
		panic(fmt.Sprintf("kernels: SgemmAddOffsetASegments: segments of %d every %d", seg, stride))
	}
	if rows.Len() < m || ldb < k || len(b) < (n-1)*ldb+k || ldc < n || len(c) < (m-1)*ldc+n ||
		rows.max+(segs-1)*stride+seg > len(a) {
		panic(fmt.Sprintf("kernels: SgemmAddOffsetASegments: operands too short for %d×%d×%d", m, n, k))
	}
	// Blocks of whole segments, at most about og.maxKC steps.
	perBlock := max(1, og.maxKC/seg)
	blocks := (segs + perBlock - 1) / perBlock
	perBlock = (segs + blocks - 1) / blocks
	nr := og.nr
	ws := getWorkspace()
	defer putWorkspace(ws)
	kcMax := perBlock * seg
	ws.b = grow(ws.b, kcMax*roundUp(n, nr))
	ws.scratch = grow(ws.scratch, 16*kcMax)
	// The edge tile lives in the workspace: a local array would escape
	// (the kernels are called through func values) and be allocated.
	ws.tile = grow(ws.tile, offMR*nr)
	tile := ws.tile
	for s0 := 0; s0 < segs; s0 += perBlock {
		ns := min(perBlock, segs-s0)
		pc, kc := s0*seg, ns*seg
		for jr := 0; jr < n; jr += nr {
			og.packBT(ws.b[jr*kc:(jr+nr)*kc], ws.scratch, b, ldb, pc, kc, jr, min(nr, n-jr), nr)
		}
		ap := &a[s0*stride]
		for ic := 0; ic < m; ic += og.mc {
			mc := min(og.mc, m-ic)
			for jr := 0; jr < n; jr += nr {
				cols := min(nr, n-jr)
				bp := &ws.b[jr*kc]
				for ir := 0; ir < mc; {
					mrEff := tileRows(mc - ir)
					ci := (ic+ir)*ldc + jr
					if cols == nr || og.masked {
						og.aSeg[mrEff](ns, seg, stride-seg, ap, &rows.bytes[ic+ir], bp, &c[ci], ldc, colMask(cols))
					} else {
						clear(tile)
						og.aSeg[mrEff](ns, seg, stride-seg, ap, &rows.bytes[ic+ir], bp, &tile[0], nr, allColumns)
						mergeTile(tile, nr, mrEff, cols, 1, 1, c[ci:], ldc)
					}
					ir += mrEff
				}
			}
		}
	}
}
