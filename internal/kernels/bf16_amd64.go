//go:build !noasm

package kernels

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Assembly of the bf16 GEMM (hand-written): the AMX kernel, packing and
// store (bf16_amd64.s) and the AVX512_BF16 kernel (bf16_avx512_amd64.s).

//go:noescape
func dpbfKernel32(a *uint16, aStep int, b *uint16, bStep, steps, panels, groups, lastGroups int, src *float32, srcStep int, dst *float32, dstLd, dstStep int)

//go:noescape
func amxKernel32(cfg *byte, a *uint16, aStep int, b *uint16, bStep, steps, panels int, src *float32, srcStep int, dst *float32, dstLd, dstStep int)

//go:noescape
func bf16RoundRows(dst *uint16, src *float32, ld, rows int, mask uint32)

//go:noescape
func bf16RoundPairs(dst *uint16, src *float32, ld, rows int, mask uint32)

//go:noescape
func bf16Transpose16(t *uint16)

//go:noescape
func amxStoreC(acc, c *float32, ldc, rows int, mask uint32, alpha, beta float32)

var (
	amxOnce sync.Once
	amxOK   bool
)

// amxAvailable reports whether the AMX kernel can run: the CPU has
// AMX-TILE and AMX-BF16 (and AVX-512BW for packing and the store), and the
// OS granted the tile state. Asked once, at first use rather than at init,
// so that programs that never multiply in bf16 never enlarge their
// signal frames.
func amxAvailable() bool {
	amxOnce.Do(func() {
		if cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW {
			amxOK = requestAMXPermission()
		}
	})
	return amxOK
}

// avx512BF16Available reports whether the AVX512_BF16 kernel can run: the
// CPU has VDPBF16PS (and AVX-512F/BW for packing and the store) and the OS
// saves the AVX-512 state (x/sys/cpu reports AVX-512 features only then).
func avx512BF16Available() bool {
	return cpu.X86.HasAVX512BF16 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW
}

// dpbf16FullRate reports whether this CPU issues VDPBF16PS as often as
// an FMA, which is what makes the AVX512_BF16 kernel faster than float32:
// AMD's cores do (Zen 4 and later); Intel's with AVX512_BF16 do not (a
// Sapphire Rapids core issues it at a quarter of the FMA rate, measured:
// the kernel ran at 0.65× the float32 SGEMM), and they get AMX instead.
func dpbf16FullRate() bool { return vendorAMD }

// vendorAMD is read once: CPUID leaves a virtual machine on every call.
var vendorAMD = cpuVendorAMD()

// kernel32 runs amxKernel32 (amx) or dpbfKernel32 on the same packed
// panels, with the same arguments. The blocks need only their first rows
// rows of C, the last block its first lastRows (≤ 32): the AVX512_BF16
// kernel then skips the 8-row groups beyond them, whose sums are left
// unwritten; the tiles always compute all 32.
func kernel32(amx bool, rows, lastRows int, a *uint16, aStep int, b *uint16, bStep, steps, panels int, src *float32, srcStep int, dst *float32, dstLd, dstStep int) {
	if amx {
		amxKernel32(&amxCfg[0], a, aStep, b, bStep, steps, panels, src, srcStep, dst, dstLd, dstStep)
		return
	}
	dpbfKernel32(a, aStep, b, bStep, steps, panels, (rows+7)/8, (lastRows+7)/8, src, srcStep, dst, dstLd, dstStep)
}

// amxCfg is the tile configuration (palette 1): tmm0–tmm7 all 16 rows of
// 64 bytes, i.e. 16×16 float32 accumulators and 16×32 bf16 operands.
var amxCfg = func() (c [64]byte) {
	c[0] = 1
	for t := 0; t < 8; t++ {
		c[16+2*t] = 64
		c[48+t] = 16
	}
	return c
}()

// Packed layout. K is zero-padded to a multiple of 32 (steps chunks). A
// row panel covers 32 rows of op(A): per chunk 2 KiB, two 16×32 bf16
// tiles (rows 0–15, 16–31). A column panel covers 32 columns of op(B):
// per chunk two VNNI tiles (columns 0–15, 16–31), row r holding the pairs
// (op(B)[2r][j], op(B)[2r+1][j]). Panels are contiguous, so the kernel
// streams through both with 64-byte tile strides.
const (
	amxTile  = 512         // bf16 per 16×32 tile
	amxChunk = 2 * amxTile // bf16 per panel and k chunk
)

// amxBBudget bounds the packed B (bytes) held at once: up to it the whole
// op(B) is packed once and every A block meets it; beyond, columns are
// blocked.
const amxBBudget = 4 << 20

// amxMC is the number of op(A) rows packed at a time: the packed A block
// (amxMC·K bf16) is reused by every B column panel, so it should stay in
// L2.
const amxMC = 256

// amxKC is the K block (a multiple of 32): a B panel's amxKC×32 chunk
// (16 KiB) stays in L1 while every row panel of the A block meets it, and
// the block's accumulators (amxMC×32 float32) with it.
const amxKC = 256

// bf16Workspace holds one goroutine's packed operands and the float32
// sums of a column of 32×32 C blocks (row-major, 1024 floats each).
type bf16Workspace struct {
	a, b []uint16
	acc  []float32
}

// bf16Workspaces is a bounded free list, like workspaces and for the same
// reason (a sync.Pool is emptied at every GC cycle).
var bf16Workspaces struct {
	mu   sync.Mutex // guards free
	free []*bf16Workspace
}

func getBF16Workspace() *bf16Workspace {
	bf16Workspaces.mu.Lock()
	defer bf16Workspaces.mu.Unlock()
	if n := len(bf16Workspaces.free); n > 0 {
		ws := bf16Workspaces.free[n-1]
		bf16Workspaces.free = bf16Workspaces.free[:n-1]
		return ws
	}
	return &bf16Workspace{acc: grow(nil, 1024)}
}

func putBF16Workspace(ws *bf16Workspace) {
	if cap(ws.a)+cap(ws.b) > 2*maxKeptFloats {
		return
	}
	bf16Workspaces.mu.Lock()
	defer bf16Workspaces.mu.Unlock()
	if len(bf16Workspaces.free) < maxFreeWorkspaces {
		bf16Workspaces.free = append(bf16Workspaces.free, ws)
	}
}

// growU16 returns buf resized to n, reallocated 64-byte aligned when too
// small (tile rows then never straddle cache lines).
func growU16(buf []uint16, n int) []uint16 {
	if cap(buf) >= n {
		return buf[:n]
	}
	f := grow(nil, (n+1)/2)
	return unsafe.Slice((*uint16)(unsafe.Pointer(&f[0])), 2*len(f))[:n]
}

// mask32 selects the first n (≤ 32) elements.
func mask32(n int) uint32 {
	if n >= 32 {
		return ^uint32(0)
	}
	return 1<<n - 1
}

// sgemmBF16Packed is SgemmBF16 on the AMX kernel (amx) or the
// AVX512_BF16 one, which share the packed panels and the loops around the
// kernel calls, with up to threads goroutines. Threads get disjoint column (or row) ranges of C in whole
// 32-wide panels; every element is computed by the same kernel over the
// whole K in the same order, so the split does not change the result.
func sgemmBF16Packed(amx bool, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if threads > 1 && 2*m*n*k >= parallelMinFlops {
		if n >= threads*32 || n >= m {
			if parts := splitBlocks(n, 32, threads); len(parts) > 1 {
				runParallel(len(parts), func(t int) {
					j0, j1 := parts[t][0], parts[t][1]
					bOff := j0 * ldb
					if !transB {
						bOff = j0
					}
					bf16PackedSerial(amx, transA, transB, m, j1-j0, k, alpha, a, lda, b[bOff:], ldb, beta, c[j0:], ldc)
				})
				return
			}
		} else if parts := splitBlocks(m, 32, threads); len(parts) > 1 {
			runParallel(len(parts), func(t int) {
				i0, i1 := parts[t][0], parts[t][1]
				aOff := i0 * lda
				if transA {
					aOff = i0
				}
				bf16PackedSerial(amx, transA, transB, i1-i0, n, k, alpha, a[aOff:], lda, b, ldb, beta, c[i0*ldc:], ldc)
			})
			return
		}
	}
	bf16PackedSerial(amx, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// bf16PackedSerial runs the packed GEMM on the calling goroutine: op(B) is packed
// once per column block (the whole of it up to amxBBudget), op(A) once
// per amxMC rows. For each B column panel, K is walked in amxKC chunks,
// each chunk meeting every A row panel while it is in L1, with the float32
// sums of the panel's column of 32×32 C blocks kept in ws.acc between
// chunks; after the last chunk amxStoreC applies alpha and beta, or, for
// C = A·B on a whole block, the kernel stores its tiles into C itself.
func bf16PackedSerial(amx, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	steps := (k + 31) / 32
	panelLen := steps * amxChunk
	nc := max(32, amxBBudget/(2*panelLen)*32)
	nc = min(nc, roundUp(n, 32))
	mc := min(amxMC, roundUp(m, 32))
	ws := getBF16Workspace()
	defer putBF16Workspace(ws)
	ws.b = growU16(ws.b, nc/32*panelLen)
	ws.a = growU16(ws.a, mc/32*panelLen)
	ws.acc = grow(ws.acc, max(mc/32, amxRowGroup)*1024)
	kcSteps := amxKC / 32
	direct := alpha == 1 && beta == 0
	for jc := 0; jc < n; jc += nc {
		ncEff := min(nc, n-jc)
		packBPanels(ws.b, transB, b, ldb, k, jc, ncEff)
		for ic := 0; ic < m; ic += mc {
			mcEff := min(mc, m-ic)
			packAPanels(ws.a, transA, a, lda, k, ic, mcEff)
			if mcEff <= amxRowMaxM {
				for ir := 0; ir < mcEff; ir += 32 {
					bf16PackedRow(amx, ws, steps, ir, ic+ir, min(32, mcEff-ir), jc, ncEff, alpha, beta, c, ldc)
				}
				continue
			}
			for jr := 0; jr < ncEff; jr += 32 {
				bp := ws.b[jr/32*panelLen:]
				cols := min(32, ncEff-jr)
				mask := mask32(cols)
				panels := (mcEff + 31) / 32
				lastRows := mcEff - 32*(panels-1)
				for s0 := 0; s0 < steps; s0 += kcSteps {
					ns := min(kcSteps, steps-s0)
					var src *float32
					if s0 > 0 {
						src = &ws.acc[0]
					}
					ap, bq := &ws.a[s0*amxChunk], &bp[s0*amxChunk]
					if s0+ns < steps {
						kernel32(amx, 32, lastRows, ap, 2*panelLen, bq, 0, ns, panels, src, 4096, &ws.acc[0], 32, 4096)
						continue
					}
					// Last chunk: whole blocks of C = A·B take the tiles
					// directly; the rest goes through alpha and beta.
					ci := ic*ldc + jc + jr
					ir := 0
					if direct && cols == 32 && mcEff >= 32 {
						full := mcEff / 32
						_ = c[ci+(32*full-1)*ldc+31]
						kernel32(amx, 32, 32, ap, 2*panelLen, bq, 0, ns, full, src, 4096, &c[ci], ldc, 32*ldc*4)
						ir = 32 * full
					}
					if ir == mcEff {
						continue
					}
					if src != nil {
						src = &ws.acc[ir*32]
					}
					acc := ws.acc[ir*32:]
					kernel32(amx, 32, lastRows, &ws.a[ir/32*panelLen+s0*amxChunk], 2*panelLen, bq, 0, ns, panels-ir/32, src, 4096, &acc[0], 32, 4096)
					for ; ir < mcEff; ir += 32 {
						rows := min(32, mcEff-ir)
						ci := (ic+ir)*ldc + jc + jr
						_ = c[ci+(rows-1)*ldc+cols-1]
						amxStoreC(&ws.acc[ir*32], &c[ci], ldc, rows, mask, alpha, beta)
					}
				}
			}
		}
	}
}

// amxRowMaxM is the most rows of C computed row panel by row panel
// (bf16PackedRow): up to it, fewer and longer kernel calls measured faster than
// the column-wise loops, despite B chunks being read once per row panel.
const amxRowMaxM = 64

// amxRowGroup is the number of B column panels bf16PackedRow gives one kernel
// call (their sums are kept in ws.acc between K chunks).
const amxRowGroup = 16

// bf16PackedRow is bf16PackedSerial's inner loops for row panel ir of a small A block
// (C of at most amxRowMaxM rows: a convolution's output channels, a small
// batch): the kernel calls run along the row of C blocks, so that a call
// covers many blocks however few rows there are.
func bf16PackedRow(amx bool, ws *bf16Workspace, steps, ir, ic, rows, jc, ncEff int, alpha, beta float32, c []float32, ldc int) {
	panelLen := steps * amxChunk
	kcSteps := amxKC / 32
	direct := alpha == 1 && beta == 0
	for g := 0; g < ncEff; g += 32 * amxRowGroup {
		gc := min(32*amxRowGroup, ncEff-g) // columns of C in this group
		np := (gc + 31) / 32
		for s0 := 0; s0 < steps; s0 += kcSteps {
			ns := min(kcSteps, steps-s0)
			var src *float32
			if s0 > 0 {
				src = &ws.acc[0]
			}
			ap := &ws.a[ir/32*panelLen+s0*amxChunk]
			bq := &ws.b[g/32*panelLen+s0*amxChunk]
			if s0+ns < steps {
				kernel32(amx, rows, rows, ap, 0, bq, 2*panelLen, ns, np, src, 4096, &ws.acc[0], 32, 4096)
				continue
			}
			// Last chunk: whole blocks of C = A·B take the tiles directly;
			// the rest goes through alpha and beta.
			ci := ic*ldc + jc + g
			jr := 0
			if direct && rows == 32 && gc >= 32 {
				full := gc / 32
				_ = c[ci+31*ldc+32*full-1]
				kernel32(amx, 32, 32, ap, 0, bq, 2*panelLen, ns, full, src, 4096, &c[ci], ldc, 128)
				jr = 32 * full
			}
			if jr == gc {
				continue
			}
			if src != nil {
				src = &ws.acc[jr*32]
			}
			kernel32(amx, rows, rows, ap, 0, &ws.b[(g+jr)/32*panelLen+s0*amxChunk], 2*panelLen, ns, np-jr/32, src, 4096, &ws.acc[jr*32], 32, 4096)
			for ; jr < gc; jr += 32 {
				cols := min(32, gc-jr)
				ci := ic*ldc + jc + g + jr
				_ = c[ci+(rows-1)*ldc+cols-1]
				amxStoreC(&ws.acc[jr*32], &c[ci], ldc, rows, mask32(cols), alpha, beta)
			}
		}
	}
}

// packAPanels packs rows i0..i0+rows of op(A) into consecutive row panels
// at dst, zero-padding the last panel's missing rows and K. The loops run
// along the stored rows, so the source is read line after line.
func packAPanels(dst []uint16, transA bool, a []float32, lda, k, i0, rows int) {
	steps := (k + 31) / 32
	panelLen := steps * amxChunk
	tile := func(ir, h, kk int) {
		t := dst[ir/32*panelLen+kk*amxChunk+h*amxTile:][:amxTile]
		hr := min(16, rows-ir-16*h) // rows of op(A) in this tile
		if hr <= 0 {
			clear(t)
			return
		}
		kw := min(32, k-32*kk)
		r0 := i0 + ir + 16*h
		if !transA {
			// op(A) rows are stored rows: 32 floats each.
			_ = a[(r0+hr-1)*lda+32*kk+kw-1]
			bf16RoundRows(&t[0], &a[r0*lda+32*kk], lda, hr, mask32(kw))
			return
		}
		// Aᵀ stored k×m: pairs of stored rows give [pair][row], then a
		// transpose gives the [row][pair] an A tile holds.
		_ = a[(32*kk+kw-1)*lda+r0+hr-1]
		bf16RoundPairs(&t[0], &a[32*kk*lda+r0], lda, kw, mask32(hr))
		bf16Transpose16(&t[0])
	}
	if !transA {
		for ir := 0; ir < rows; ir += 32 {
			for h := 0; h < 2; h++ {
				for kk := 0; kk < steps; kk++ {
					tile(ir, h, kk)
				}
			}
		}
		return
	}
	for kk := 0; kk < steps; kk++ {
		for ir := 0; ir < rows; ir += 32 {
			for h := 0; h < 2; h++ {
				tile(ir, h, kk)
			}
		}
	}
}

// packBPanels packs columns j0..j0+cols of op(B) into consecutive VNNI
// column panels at dst, zero-padding the last panel's missing columns and
// K, reading the source along its stored rows.
func packBPanels(dst []uint16, transB bool, b []float32, ldb, k, j0, cols int) {
	steps := (k + 31) / 32
	panelLen := steps * amxChunk
	tile := func(jr, h, kk int) {
		t := dst[jr/32*panelLen+kk*amxChunk+h*amxTile:][:amxTile]
		hc := min(16, cols-jr-16*h)
		if hc <= 0 {
			clear(t)
			return
		}
		kw := min(32, k-32*kk)
		c0 := j0 + jr + 16*h
		if !transB {
			// Pairs of stored rows interleaved: the VNNI layout itself.
			_ = b[(32*kk+kw-1)*ldb+c0+hc-1]
			bf16RoundPairs(&t[0], &b[32*kk*ldb+c0], ldb, kw, mask32(hc))
			return
		}
		// Bᵀ stored n×k: a stored row is a column of op(B), its
		// consecutive k already paired; transpose [column][pair].
		_ = b[(c0+hc-1)*ldb+32*kk+kw-1]
		bf16RoundRows(&t[0], &b[c0*ldb+32*kk], ldb, hc, mask32(kw))
		bf16Transpose16(&t[0])
	}
	if transB {
		for jr := 0; jr < cols; jr += 32 {
			for h := 0; h < 2; h++ {
				for kk := 0; kk < steps; kk++ {
					tile(jr, h, kk)
				}
			}
		}
		return
	}
	for kk := 0; kk < steps; kk++ {
		for jr := 0; jr < cols; jr += 32 {
			for h := 0; h < 2; h++ {
				tile(jr, h, kk)
			}
		}
	}
}
