//go:build !noasm

package kernels

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Assembly of the AMX bf16 GEMM (bf16_amd64.s, hand-written).

//go:noescape
func amxKernel32(cfg *byte, a, b *uint16, steps int, acc *float32)

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
// op(B) is packed once and every A panel meets it; beyond, columns are
// blocked.
const amxBBudget = 4 << 20

// amxMC is the number of op(A) rows packed at a time: the packed A block
// (amxMC·K bf16) is reused by every B column panel, so it should stay in
// L2.
const amxMC = 128

// bf16Workspace holds one goroutine's packed operands and accumulator.
type bf16Workspace struct {
	a, b []uint16
	acc  []float32
}

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

// sgemmBF16AMX is SgemmBF16 on the AMX kernel with up to threads
// goroutines. Threads get disjoint column (or row) ranges of C in whole
// 32-wide panels; every element is computed by the same kernel over the
// whole K in the same order, so the split does not change the result.
func sgemmBF16AMX(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if threads > 1 && 2*m*n*k >= parallelMinFlops {
		if n >= threads*32 || n >= m {
			if parts := splitBlocks(n, 32, threads); len(parts) > 1 {
				runParallel(len(parts), func(t int) {
					j0, j1 := parts[t][0], parts[t][1]
					bOff := j0 * ldb
					if !transB {
						bOff = j0
					}
					amxSerial(transA, transB, m, j1-j0, k, alpha, a, lda, b[bOff:], ldb, beta, c[j0:], ldc)
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
				amxSerial(transA, transB, i1-i0, n, k, alpha, a[aOff:], lda, b, ldb, beta, c[i0*ldc:], ldc)
			})
			return
		}
	}
	amxSerial(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// amxSerial runs the AMX GEMM on the calling goroutine: op(B) is packed
// once per column block (the whole of it up to amxBBudget), op(A) once
// per amxMC rows, and each 32×32 block of C gets one kernel call over the
// whole K and one store.
func amxSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	steps := (k + 31) / 32
	panelLen := steps * amxChunk
	nc := max(32, amxBBudget/(2*panelLen)*32)
	nc = min(nc, roundUp(n, 32))
	mc := min(amxMC, roundUp(m, 32))
	ws := getBF16Workspace()
	defer putBF16Workspace(ws)
	ws.b = growU16(ws.b, nc/32*panelLen)
	ws.a = growU16(ws.a, mc/32*panelLen)
	acc := ws.acc[:1024]
	for jc := 0; jc < n; jc += nc {
		ncEff := min(nc, n-jc)
		for jr := 0; jr < ncEff; jr += 32 {
			packBPanel(ws.b[jr/32*panelLen:(jr/32+1)*panelLen], transB, b, ldb, k, jc+jr, min(32, ncEff-jr))
		}
		for ic := 0; ic < m; ic += mc {
			mcEff := min(mc, m-ic)
			for ir := 0; ir < mcEff; ir += 32 {
				packAPanel(ws.a[ir/32*panelLen:(ir/32+1)*panelLen], transA, a, lda, k, ic+ir, min(32, mcEff-ir))
			}
			for jr := 0; jr < ncEff; jr += 32 {
				bp := &ws.b[jr/32*panelLen]
				cols := min(32, ncEff-jr)
				mask := mask32(cols)
				for ir := 0; ir < mcEff; ir += 32 {
					rows := min(32, mcEff-ir)
					amxKernel32(&amxCfg[0], &ws.a[ir/32*panelLen], bp, steps, &acc[0])
					ci := (ic+ir)*ldc + jc + jr
					_ = c[ci+(rows-1)*ldc+cols-1]
					amxStoreC(&acc[0], &c[ci], ldc, rows, mask, alpha, beta)
				}
			}
		}
	}
}

// packAPanel packs rows i0..i0+rows (rows ≤ 32) of op(A) into dst (one
// row panel), zero-padding missing rows and K.
func packAPanel(dst []uint16, transA bool, a []float32, lda, k, i0, rows int) {
	steps := (k + 31) / 32
	for h := 0; h < 2; h++ {
		hr := min(16, rows-16*h) // rows of op(A) in this tile
		for kk := 0; kk < steps; kk++ {
			t := dst[kk*amxChunk+h*amxTile : kk*amxChunk+(h+1)*amxTile]
			kw := min(32, k-32*kk)
			if hr <= 0 {
				clear(t)
				continue
			}
			r0 := i0 + 16*h
			if !transA {
				// op(A) rows are stored rows: 32 floats each.
				_ = a[(r0+hr-1)*lda+32*kk+kw-1]
				bf16RoundRows(&t[0], &a[r0*lda+32*kk], lda, hr, mask32(kw))
				continue
			}
			// Aᵀ stored k×m: pairs of stored rows give [pair][row], then
			// a transpose gives the [row][pair] an A tile holds.
			_ = a[(32*kk+kw-1)*lda+r0+hr-1]
			bf16RoundPairs(&t[0], &a[32*kk*lda+r0], lda, kw, mask32(hr))
			bf16Transpose16(&t[0])
		}
	}
}

// packBPanel packs columns j0..j0+cols (cols ≤ 32) of op(B) into dst (one
// VNNI column panel), zero-padding missing columns and K.
func packBPanel(dst []uint16, transB bool, b []float32, ldb, k, j0, cols int) {
	steps := (k + 31) / 32
	for h := 0; h < 2; h++ {
		hc := min(16, cols-16*h)
		for kk := 0; kk < steps; kk++ {
			t := dst[kk*amxChunk+h*amxTile : kk*amxChunk+(h+1)*amxTile]
			kw := min(32, k-32*kk)
			if hc <= 0 {
				clear(t)
				continue
			}
			c0 := j0 + 16*h
			if !transB {
				// Pairs of stored rows interleaved: the VNNI layout itself.
				_ = b[(32*kk+kw-1)*ldb+c0+hc-1]
				bf16RoundPairs(&t[0], &b[32*kk*ldb+c0], ldb, kw, mask32(hc))
				continue
			}
			// Bᵀ stored n×k: a stored row is a column of op(B), its
			// consecutive k already paired; transpose [column][pair].
			_ = b[(c0+hc-1)*ldb+32*kk+kw-1]
			bf16RoundRows(&t[0], &b[c0*ldb+32*kk], ldb, hc, mask32(kw))
			bf16Transpose16(&t[0])
		}
	}
}
