package kernels

//go:generate go run gen_asm.go

import (
	"sync"
	"unsafe"
)

// microKernel computes one mr×nr tile of C:
//
//	c[i*ldc+j] = alpha·Σ_p a[i*aRow+p*aCol]·b[p*bRow+j] + beta·c[i*ldc+j]
//
// A packed A micro-panel (k steps of mr floats) has aRow=1, aCol=mr, a
// packed B micro-panel bRow=nr; other strides read an operand in place.
// When beta is ±0 it must not read c. A kernel of a masked implementation
// touches only the columns of c selected by masks (bits 16v..16v+15 for the
// v-th 16-float vector of the row); other kernels ignore masks.
type microKernel func(k int, a *float32, aRow, aCol int, b *float32, bRow int, c *float32, ldc int, alpha, beta float32, masks uint64)

// gemmImpl is one SGEMM implementation: micro-kernels with their register
// block (mr×nr) and the cache blocking that suits them. Loops follow BLIS:
// jc over nc columns, pc over kc (the kc×nc block of B packed), ic over mc
// rows (the mc×kc block of A, read in place, stays in L2), then jr over nr
// and ir over mr, so a B micro-panel is reused by every A micro-panel.
type gemmImpl struct {
	name       string
	mr, nr     int
	kc, mc, nc int
	// kernels[r] computes r rows of a tile; kernels[mr] is the full tile.
	// Entries below mr may be nil: such edge rows are packed (zero-padded)
	// and computed by the full kernel into a scratch tile.
	kernels []microKernel
	// masked kernels store only the columns that exist (see microKernel).
	masked bool
	// narrow, if set, replaces this implementation when n ≤ narrow.nr
	// (and its own narrow in turn).
	narrow *gemmImpl
	// dot, if set, holds dot-product kernels dot[rows][cols] (rows ≤ 4,
	// cols ≤ 5) used for C = A·Bᵀ with at most swapMaxN columns.
	dot *[5][6]dotKernel
	// packBT packs a transposed B panel faster than the Go loop, or is nil;
	// scratch holds at least 16·kc floats.
	packBT func(dst, scratch, b []float32, ldb, p0, kc, j0, cols, nr int)
}

// dotKernel computes a tile of C = alpha·A·Bᵀ + beta·C with A and B read in
// place (rows of both run along k); beta ±0 does not read C.
type dotKernel func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32)

// gemm is the implementation Sgemm uses, chosen at init from CPU features.
var gemm = defaultGemm()

// genericGemm is the portable implementation (pure Go micro-kernel).
var genericGemm = &gemmImpl{name: "generic", mr: 4, nr: 16, kc: 256, mc: 128, nc: 2048, kernels: []microKernel{4: microGeneric}}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices, where
// op(X) is X or Xᵀ as transA/transB say. op(A) is m×k, op(B) is k×n and C is
// m×n; lda, ldb and ldc are the row strides of A, B and C as stored.
//
// Reference loop:
//
//	for i < m, j < n: c[i*ldc+j] = alpha*Σ_p opA(i,p)*opB(p,j) + beta*c[i*ldc+j]
//
// When beta is 0, C is not read (NaNs in C do not propagate). Large problems
// are split over NumThreads goroutines; small ones run on the caller's. The
// result is bitwise the same whatever the thread count: each element is
// summed by the same kernel in the same order.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemmArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	t0, obs := observeStart()
	sgemmWith(gemm, NumThreads(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc)
	observeEnd(obs, t0, false, transA, transB, m, n, k)
}

// SgemmBias computes C = alpha·op(A)·op(B) + bias, bias[j] added to every
// row's column j (a linear layer's forward pass), without reading C. It
// equals filling each row of C with bias and calling Sgemm with beta 1,
// bit for bit, but each register tile of C is filled just before the
// micro-kernel adds to it, while it is in L1, instead of in a pass over
// the whole of C beforehand. It panics when len(bias) < n.
func SgemmBias(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int) {
	checkGemmArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if len(bias) < n {
		panic("kernels: SgemmBias bias shorter than n")
	}
	if m == 0 || n == 0 {
		return
	}
	t0, obs := observeStart()
	sgemmWith(gemm, NumThreads(), transA, transB, m, n, k, alpha, a, lda, b, ldb, 1, bias[:n], c, ldc)
	observeEnd(obs, t0, false, transA, transB, m, n, k)
}

// SgemmSerial is Sgemm on the calling goroutine only, whatever NumThreads
// says: for callers that already spread independent products over their
// own goroutines (a convolution over the images of a batch), where a
// second level of splitting would only add goroutines contending for the
// same cores.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemmArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	t0, obs := observeStart()
	sgemmWith(gemm, 1, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc)
	observeEnd(obs, t0, true, transA, transB, m, n, k)
}

func checkGemmArgs(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic("kernels: Sgemm negative dimension")
	}
	checkMat := func(what string, rows, cols int, x []float32, ld int) {
		if rows == 0 || cols == 0 {
			return
		}
		if ld < cols {
			panic("kernels: Sgemm " + what + " leading dimension too small")
		}
		if len(x) < (rows-1)*ld+cols {
			panic("kernels: Sgemm " + what + " slice too short")
		}
	}
	if m == 0 || n == 0 {
		return
	}
	if transA {
		checkMat("A", k, m, a, lda)
	} else {
		checkMat("A", m, k, a, lda)
	}
	if transB {
		checkMat("B", n, k, b, ldb)
	} else {
		checkMat("B", k, n, b, ldb)
	}
	checkMat("C", m, n, c, ldc)
}

// parallelMinFlops is the smallest problem (2·m·n·k) worth splitting over
// goroutines: below it the wake-up and join cost more than they save.
const parallelMinFlops = 2 << 20

// sgemmWith runs Sgemm on impl with up to threads goroutines; a non-nil
// bias (then beta is 1) is first written to C as SgemmBias says. Threads get
// disjoint column (or row) ranges of C, each a multiple of the register
// block, and run the whole blocked algorithm on their part with their own
// packing buffers: no synchronisation inside, and packing the shared operand
// twice costs O(k·(m+n)) against O(m·n·k) of work.
func sgemmWith(impl *gemmImpl, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, bias, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	// A thin C goes to the dot-product tiles or to its transpose.
	dot := n <= swapMaxN && !transA && transB && impl.dot != nil
	swapped := n <= swapMaxN && m >= 4*n && impl.kernels[1] != nil
	if bias != nil && (k == 0 || alpha == 0 || dot || swapped) {
		// These paths do not fill tiles: fill C whole first.
		fillTile(c, ldc, m, n, bias)
		bias = nil
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if dot {
		sgemmDot(impl.dot, threads, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if swapped {
		sgemmSwapped(impl, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	for impl.narrow != nil && n <= impl.narrow.nr {
		impl = impl.narrow
	}
	flops := 2 * m * n * k
	if threads > 1 && flops >= parallelMinFlops {
		// Split along n unless n is too narrow to give every thread at
		// least one register block, or m splits into more even parts.
		if splitAlongN(impl, threads, m, n) {
			parts := splitBlocks(n, impl.nr, threads)
			if len(parts) > 1 {
				runParallel(len(parts), func(t int) {
					j0, j1 := parts[t][0], parts[t][1]
					bOff := j0 * ldb
					if !transB {
						bOff = j0
					}
					var bj []float32
					if bias != nil {
						bj = bias[j0:j1]
					}
					sgemmSerial(impl, transA, transB, m, j1-j0, k, alpha, a, lda, b[bOff:], ldb, beta, bj, c[j0:], ldc)
				})
				return
			}
		} else {
			parts := splitBlocks(m, impl.mr, threads)
			if len(parts) > 1 {
				runParallel(len(parts), func(t int) {
					i0, i1 := parts[t][0], parts[t][1]
					aOff := i0 * lda
					if transA {
						aOff = i0
					}
					sgemmSerial(impl, transA, transB, i1-i0, n, k, alpha, a[aOff:], lda, b, ldb, beta, bias, c[i0*ldc:], ldc)
				})
				return
			}
		}
	}
	sgemmSerial(impl, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, bias, c, ldc)
}

// splitAlongN reports whether sgemmWith splits C's columns rather than
// its rows over threads. Columns come first: every thread then packs only
// its own part of B. Rows win when n is too narrow to give every thread a
// register block, or when whole blocks of n divide unevenly (784 columns
// are 7 and 6 blocks of 64, one thread idle an eighth of the time) and the
// rows, at least splitMinRows per thread, divide more evenly; packing all
// of B per thread then costs k·n against m·n·k/threads of work.
func splitAlongN(impl *gemmImpl, threads, m, n int) bool {
	if n < threads*impl.nr && n < m {
		return false
	}
	if m < threads*splitMinRows {
		return true
	}
	// The first part is the largest: compare its share of each side.
	np, mp := splitBlocks(n, impl.nr, threads), splitBlocks(m, impl.mr, threads)
	if len(mp) < len(np) {
		return true
	}
	nw, mw := np[0][1]-np[0][0], mp[0][1]-mp[0][0]
	return nw*m <= mw*n
}

// splitMinRows is the fewest rows of C per thread for which sgemmWith
// splits rows to balance threads when it could split columns.
const splitMinRows = 48

// swapMaxN is the widest C computed as a transposed product: a C of few
// columns (the logits layer's 10) fills only part of each vector, while its
// transpose has few rows, which the row-edge kernels handle at full width.
const swapMaxN = 16

// sgemmSwapped computes C = alpha·op(A)·op(B) + beta·C through
// Cᵀ = op(B)ᵀ·op(A)ᵀ in a scratch buffer, then transposes it into C.
func sgemmSwapped(impl *gemmImpl, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ws := getWorkspace()
	defer putWorkspace(ws)
	ws.swap = grow(ws.swap, n*m)
	t := ws.swap
	sgemmWith(impl, threads, !transB, !transA, n, m, k, 1, b, ldb, a, lda, 0, nil, t, m)
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		if beta == 0 {
			for j := range ci {
				ci[j] = alpha * t[j*m+i]
			}
		} else {
			for j := range ci {
				ci[j] = alpha*t[j*m+i] + beta*ci[j]
			}
		}
	}
}

// sgemmDot computes C = alpha·A·Bᵀ + beta·C (C thin) with dot-product
// tiles of at most 4×5, sized evenly so no tile is much thinner than the
// rest; rows are split over threads when the product is large enough.
func sgemmDot(dot *[5][6]dotKernel, threads, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	colGroups := (n + 4) / 5
	rows := func(i0, i1 int) {
		rowGroups := (i1 - i0 + 3) / 4
		for g, i := 0, i0; g < rowGroups; g++ {
			r := (i1 - i + (rowGroups - g) - 1) / (rowGroups - g)
			for h, j := 0, 0; h < colGroups; h++ {
				s := (n - j + (colGroups - h) - 1) / (colGroups - h)
				dot[r][s](k, &a[i*lda], lda, &b[j*ldb], ldb, &c[i*ldc+j], ldc, alpha, beta)
				j += s
			}
			i += r
		}
	}
	if threads > 1 && 2*m*n*k >= parallelMinFlops {
		if parts := splitBlocks(m, 4, threads); len(parts) > 1 {
			runParallel(len(parts), func(t int) { rows(parts[t][0], parts[t][1]) })
			return
		}
	}
	rows(0, m)
}

// splitBlocks divides [0,n) into at most parts ranges of whole blocks
// (the last may be partial), as even as possible.
func splitBlocks(n, block, parts int) [][2]int {
	blocks := (n + block - 1) / block
	if parts > blocks {
		parts = blocks
	}
	out := make([][2]int, 0, parts)
	start := 0
	for t := 0; t < parts; t++ {
		nb := blocks / parts
		if t < blocks%parts {
			nb++
		}
		end := min(start+nb*block, n)
		out = append(out, [2]int{start, end})
		start = end
	}
	return out
}

// runParallel calls f(0..n-1), f(0) on the calling goroutine.
func runParallel(n int, f func(int)) { Parallel(n, f) }

// scaleC sets C = beta·C, writing zeros without reading C when beta is 0.
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			Scale(beta, row)
		}
	}
}

// workspace holds one goroutine's packing buffers.
type workspace struct {
	a, b    []float32
	tile    []float32
	scratch []float32
	swap    []float32
}

// workspaces is a bounded free list rather than a sync.Pool: the GC
// empties a Pool at every cycle, and refilling it means faulting in fresh
// megabytes of packing buffers in the middle of a training step.
var workspaces struct {
	mu   sync.Mutex // guards free
	free []*workspace
}

// maxFreeWorkspaces bounds the free list (a few per core is plenty), and
// maxKeptFloats keeps a workspace grown by one huge product from being
// held forever.
const (
	maxFreeWorkspaces = 8
	maxKeptFloats     = 4 << 20
)

func getWorkspace() *workspace {
	workspaces.mu.Lock()
	defer workspaces.mu.Unlock()
	if n := len(workspaces.free); n > 0 {
		ws := workspaces.free[n-1]
		workspaces.free = workspaces.free[:n-1]
		return ws
	}
	return new(workspace)
}

func putWorkspace(ws *workspace) {
	if cap(ws.a)+cap(ws.b)+cap(ws.tile)+cap(ws.scratch)+cap(ws.swap) > maxKeptFloats {
		return
	}
	workspaces.mu.Lock()
	defer workspaces.mu.Unlock()
	if len(workspaces.free) < maxFreeWorkspaces {
		workspaces.free = append(workspaces.free, ws)
	}
}

// grow returns buf resized to n, reallocated 64-byte aligned when too small.
func grow(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	raw := make([]float32, n+16)
	off := 0
	if r := uintptr(unsafe.Pointer(&raw[0])) & 63; r != 0 {
		off = int(64-r) / 4
	}
	return raw[off : off+n : off+n]
}

// directBMaxPanels is the number of A micro-panels up to which B is read
// in place rather than packed, and directBShortMaxPanels the number up to
// which a B of short rows is (see sgemmSerial). B is never read in place
// with a row stride of a multiple of 4 KiB: its rows would all map to the
// same L1 sets.
const (
	directBMaxPanels      = 16
	directBShortMaxPanels = 96
)

func sgemmSerial(impl *gemmImpl, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, bias, c []float32, ldc int) {
	mr, nr := impl.mr, impl.nr
	ws := getWorkspace()
	defer putWorkspace(ws)
	kcMax := min(impl.kc, k)
	ncMax := min(impl.nc, roundUp(n, nr))
	ws.b = grow(ws.b, kcMax*roundUp(ncMax, nr))
	ws.a = grow(ws.a, kcMax*mr)
	ws.tile = grow(ws.tile, mr*nr)
	ws.scratch = grow(ws.scratch, 16*kcMax)

	// A is read in place (measured faster than packing it at every shape
	// here: its micro-panels stream from L2 either way, and packing costs a
	// pass over A), except edge rows of kernels without a row variant.
	// Packing B pays when its micro-panel is reused by many A micro-panels;
	// it also absorbs Bᵀ, so only an untransposed B is read in place: with
	// few A rows, or with a few hundred and short rows (≤ 1024 floats) read
	// 32 or more floats at a time, whose block streams from L2 as a packed
	// one would. That is the GPT's dW = gᵀ·x (m ≤ 512, k = 4096): its
	// 128×512 case ran 140–160 GFLOP/s packed and 163–173 in place, 3
	// alternating rounds; its dx = g·W (m = 4096) is faster packed.
	directB := !transB && (m <= directBMaxPanels*mr || m <= directBShortMaxPanels*mr && ldb <= 1024 && nr >= 32) &&
		(ldb*4)%4096 != 0

	for jc := 0; jc < n; jc += impl.nc {
		nc := min(impl.nc, n-jc)
		for pc := 0; pc < k; pc += impl.kc {
			kc := min(impl.kc, k-pc)
			betaEff := beta
			if pc > 0 {
				betaEff = 1
			}
			impl.packBBlock(ws, transB, directB, b, ldb, pc, kc, jc, nc)
			for ic := 0; ic < m; ic += impl.mc {
				mc := min(impl.mc, m-ic)
				impl.packAEdge(ws, transA, a, lda, ic, mc, pc, kc)
				tile := func(ir, jr int) {
					mrEff, nrEff := min(mr, mc-ir), min(nr, nc-jr)
					ap, aRow, aCol := tileA(impl, transA, a, lda, ic+ir, pc, mrEff, ws)
					bp, bRow := &ws.b[jr*kc], nr
					if directB && nrEff == nr {
						bp, bRow = &b[pc*ldb+jc+jr], ldb
					}
					ci := (ic+ir)*ldc + jc + jr
					if pc == 0 && bias != nil {
						fillTile(c[ci:], ldc, mrEff, nrEff, bias[jc+jr:])
					}
					impl.runTile(kc, ap, aRow, aCol, bp, bRow, c[ci:], ldc, mrEff, nrEff, alpha, betaEff, ws)
				}
				// A B micro-panel is reused across the A block's micro-panels.
				for jr := 0; jr < nc; jr += nr {
					for ir := 0; ir < mc; ir += mr {
						tile(ir, jr)
					}
				}
			}
		}
	}
}

// tileA returns where the micro-kernel reads rows ir..ir+rows of A's
// columns from pc on, and with which strides: in place, or the packed edge
// panel in ws.a when impl has no kernel for that many rows.
func tileA(impl *gemmImpl, transA bool, a []float32, lda, ir, pc, rows int, ws *workspace) (ap *float32, aRow, aCol int) {
	switch {
	case impl.kernels[rows] == nil:
		return &ws.a[0], 1, impl.mr
	case transA:
		return &a[pc*lda+ir], 1, lda
	default:
		return &a[ir*lda+pc], lda, 1
	}
}

// runTile computes the rows×cols tile of C at c (row stride ldc) from the
// A micro-panel at ap (strides aRow, aCol) and the B micro-panel at bp
// (row stride bRow), k steps: the full kernel for a whole tile, the row
// kernel where impl has one (masked to the columns that exist), or else
// a kernel into the scratch tile ws.tile, merged into C.
func (impl *gemmImpl) runTile(k int, ap *float32, aRow, aCol int, bp *float32, bRow int, c []float32, ldc, rows, cols int, alpha, beta float32, ws *workspace) {
	mr, nr := impl.mr, impl.nr
	if rows == mr && cols == nr {
		impl.kernels[mr](k, ap, aRow, aCol, bp, bRow, &c[0], ldc, alpha, beta, allColumns)
		return
	}
	rk := impl.kernels[rows]
	if rk != nil && (cols == nr || impl.masked) {
		rk(k, ap, aRow, aCol, bp, bRow, &c[0], ldc, alpha, beta, columnMasks(cols))
		return
	}
	// Scratch tile: the row kernel (A may be read in place) or the full
	// one on the zero-padded packed A panel.
	if rk == nil {
		rk = impl.kernels[mr]
	}
	rk(k, ap, aRow, aCol, bp, bRow, &ws.tile[0], nr, 1, 0, allColumns)
	mergeTile(ws.tile, nr, rows, cols, alpha, beta, c, ldc)
}

// fillTileGeneric writes bias[:cols] into each of the first rows rows of C.
func fillTileGeneric(c []float32, ldc, rows, cols int, bias []float32) {
	src := bias[:cols]
	for i := range rows {
		copy(c[i*ldc:i*ldc+cols], src)
	}
}

// packBBlock packs the B block of rows pc..pc+kc and columns jc..jc+nc
// into ws.b, one nr-column micro-panel after another, the last
// zero-padded; with directB, full micro-panels are left to be read in
// place.
func (impl *gemmImpl) packBBlock(ws *workspace, transB, directB bool, b []float32, ldb, pc, kc, jc, nc int) {
	nr := impl.nr
	for jr := 0; jr < nc; jr += nr {
		cols := min(nr, nc-jr)
		if directB && cols == nr {
			continue
		}
		dst := ws.b[jr*kc : (jr+nr)*kc]
		switch {
		case !transB:
			packBNoTrans(dst, b, ldb, pc, kc, jc+jr, cols, nr)
		case impl.packBT != nil:
			impl.packBT(dst, ws.scratch, b, ldb, pc, kc, jc+jr, cols, nr)
		default:
			packBTrans(dst, b, ldb, pc, kc, jc+jr, cols, nr)
		}
	}
}

// packAEdge packs into ws.a, zero-padded, the last micro-panel of the A
// block of rows ic..ic+mc and columns pc..pc+kc when it has fewer than mr
// rows and no kernel of its own; A is otherwise read in place.
func (impl *gemmImpl) packAEdge(ws *workspace, transA bool, a []float32, lda, ic, mc, pc, kc int) {
	mr := impl.mr
	rows := mc % mr
	if rows == 0 || impl.kernels[rows] != nil {
		return
	}
	ir := mc - rows
	if transA {
		packATrans(ws.a, a, lda, ic+ir, rows, pc, kc, mr)
	} else {
		packANoTrans(ws.a, a, lda, ic+ir, rows, pc, kc, mr)
	}
}

// allColumns selects every column of a tile (see microKernel).
const allColumns = ^uint64(0)

// columnMasks returns the microKernel masks selecting the first n columns.
func columnMasks(n int) uint64 {
	if n >= 64 {
		return allColumns
	}
	return 1<<n - 1
}

// mergeTile writes C = alpha·T + beta·C for the valid mr×nr corner of tile
// T (row stride ldt), not reading C when beta is 0.
func mergeTile(t []float32, ldt, mr, nr int, alpha, beta float32, c []float32, ldc int) {
	for i := 0; i < mr; i++ {
		ti := t[i*ldt : i*ldt+nr]
		ci := c[i*ldc : i*ldc+nr]
		if beta == 0 {
			for j, v := range ti {
				ci[j] = alpha * v
			}
		} else {
			for j, v := range ti {
				ci[j] = alpha*v + beta*ci[j]
			}
		}
	}
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// packANoTrans packs rows i0..i0+rows of A (row-major, m×k) at columns
// p0..p0+kc into dst as kc steps of mr floats, zero-padding missing rows.
func packANoTrans(dst, a []float32, lda, i0, rows, p0, kc, mr int) {
	dst = dst[:kc*mr]
	for r := 0; r < rows; r++ {
		src := a[(i0+r)*lda+p0 : (i0+r)*lda+p0+kc]
		d := dst[r:]
		for p, v := range src {
			d[p*mr] = v
		}
	}
	for r := rows; r < mr; r++ {
		for p := 0; p < kc; p++ {
			dst[p*mr+r] = 0
		}
	}
}

// packATrans packs op(A) = Aᵀ (A stored k×m) rows i0..i0+rows: stored
// Aᵀ's rows are contiguous like untransposed B's, so the packing is the same.
func packATrans(dst, a []float32, lda, i0, rows, p0, kc, mr int) {
	packBNoTrans(dst, a, lda, p0, kc, i0, rows, mr)
}

// packBNoTrans packs columns j0..j0+cols of B (stored k×n) at rows
// p0..p0+kc into dst as kc steps of nr floats, zero-padding missing columns.
func packBNoTrans(dst, b []float32, ldb, p0, kc, j0, cols, nr int) {
	dst = dst[:kc*nr]
	for p := 0; p < kc; p++ {
		d := dst[p*nr : p*nr+nr]
		src := b[(p0+p)*ldb+j0 : (p0+p)*ldb+j0+cols]
		copy(d, src)
		clear(d[cols:])
	}
}

// packBTrans packs op(B) = Bᵀ (B stored n×k) columns j0..j0+cols.
func packBTrans(dst, b []float32, ldb, p0, kc, j0, cols, nr int) {
	dst = dst[:kc*nr]
	for j := 0; j < cols; j++ {
		src := b[(j0+j)*ldb+p0 : (j0+j)*ldb+p0+kc]
		d := dst[j:]
		for p, v := range src {
			d[p*nr] = v
		}
	}
	for j := cols; j < nr; j++ {
		for p := 0; p < kc; p++ {
			dst[p*nr+j] = 0
		}
	}
}
