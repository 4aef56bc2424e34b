package kernels

import "fmt"

// PackedB is the right operand op(B) of GEMMs, k×n, packed once into the
// micro-kernels' layout so that many products against its columns skip
// the packing SgemmSerial repeats at every call: attention multiplies
// each block of queries by the same keys. The zero value is ready for
// Pack; a PackedB is for one goroutine at a time, and it keeps a
// reference to the B it was packed from until packed again or Reset.
type PackedB struct {
	impl   *gemmImpl // the implementation whose layout data holds
	transB bool
	k, n   int
	b      []float32 // the source, for products the layout does not serve
	ldb    int
	// data holds, for each block of impl.kc rows (the last may be
	// shorter), roundUp(n, impl.nr) columns in micro-panels of impl.nr
	// columns, the last zero-padded: the layout sgemmSerial packs B into.
	data []float32
	// ws supplies a product's scratch: the zero-padded A edge panel and
	// the edge tile of kernels without masks.
	ws workspace
}

// Pack packs op(B) into p: B is stored n×k (row stride ldb) when transB,
// else k×n. It panics when B does not fit its shape.
func (p *PackedB) Pack(transB bool, k, n int, b []float32, ldb int) {
	p.packWith(gemm, transB, k, n, b, ldb)
}

// Reset drops p's reference to the B it was packed from, keeping its
// buffers for the next Pack.
func (p *PackedB) Reset() {
	*p = PackedB{data: p.data, ws: p.ws}
}

// packWith is Pack in the layout of impl.
func (p *PackedB) packWith(impl *gemmImpl, transB bool, k, n int, b []float32, ldb int) {
	if k < 0 || n < 0 {
		panic(fmt.Sprintf("kernels: PackedB.Pack: negative dimension k=%d n=%d", k, n))
	}
	rows, cols := k, n
	if transB {
		rows, cols = n, k
	}
	if rows > 0 && cols > 0 && (ldb < cols || len(b) < (rows-1)*ldb+cols) {
		panic(fmt.Sprintf("kernels: PackedB.Pack: B of %d floats, row stride %d, does not hold %d×%d", len(b), ldb, rows, cols))
	}
	*p = PackedB{impl: impl, transB: transB, k: k, n: n, b: b, ldb: ldb, data: p.data, ws: p.ws}
	if k == 0 || n == 0 {
		return
	}
	kc, nPad := min(impl.kc, k), roundUp(n, impl.nr)
	p.data = grow(p.data, k*nPad)
	p.ws.scratch = grow(p.ws.scratch, 16*kc)
	for pc := 0; pc < k; pc += impl.kc {
		// packBBlock packs into ws.b: point it at this block of rows.
		p.ws.b = p.data[pc*nPad:]
		impl.packBBlock(&p.ws, transB, false, b, ldb, pc, min(impl.kc, k-pc), 0, n)
	}
	p.ws.b = nil
}

// SgemmPackedB computes C = alpha·op(A)·B' + beta·C on the calling
// goroutine, where B' is columns j0..j0+n of the k×n' operand p holds:
// SgemmSerial with that op(B), bit for bit (each element is summed by the
// same kernel in the same order), but with B packed beforehand. C is
// m×n; A is m×k (stored k×m when transA). A GEMM observer sees it as
// SgemmSerial(transA, transB of Pack, m, n, k). It panics when the
// operands do not fit.
func SgemmPackedB(transA bool, m, n, k int, alpha float32, a []float32, lda int, p *PackedB, j0 int, beta float32, c []float32, ldc int) {
	if k != p.k || j0 < 0 || n < 0 || j0+n > p.n {
		panic(fmt.Sprintf("kernels: SgemmPackedB: k=%d and columns %d..%d do not fit the packed B (k=%d, %d columns)", k, j0, j0+n, p.k, p.n))
	}
	b := p.columns(j0)
	checkGemmArgs(transA, p.transB, m, n, k, a, lda, b, p.ldb, c, ldc)
	t0, obs := observeStart()
	if impl := p.implFor(transA, m, n, k, alpha, j0); impl != nil {
		p.sgemm(impl, true, transA, m, n, k, alpha, a, lda, j0, beta, c, ldc)
	} else {
		sgemmWith(p.impl, 1, transA, p.transB, m, n, k, alpha, a, lda, b, p.ldb, beta, nil, c, ldc)
	}
	observeEnd(obs, t0, true, transA, p.transB, m, n, k)
}

// columns returns the source B from column j0 of op(B) on.
func (p *PackedB) columns(j0 int) []float32 {
	if j0 == 0 || p.n == 0 {
		return p.b
	}
	if p.transB {
		return p.b[j0*p.ldb:]
	}
	return p.b[j0:]
}

// implFor returns the implementation sgemmWith would run an m×n×k product
// on, starting from the one p was packed for, when the packed layout
// serves it; nil when the product goes elsewhere (nothing to multiply,
// the thin-C paths) or the layout does not fit it: its panels must tile
// the packed ones from column j0, with the same row blocks.
func (p *PackedB) implFor(transA bool, m, n, k int, alpha float32, j0 int) *gemmImpl {
	if p.impl == nil || m == 0 || n == 0 || k == 0 || alpha == 0 {
		return nil
	}
	impl := p.impl
	if n <= swapMaxN && (!transA && p.transB && impl.dot != nil || m >= 4*n && impl.kernels[1] != nil) {
		return nil
	}
	for impl.narrow != nil && n <= impl.narrow.nr {
		impl = impl.narrow
	}
	if p.impl.nr%impl.nr != 0 || j0%impl.nr != 0 || impl.kc != p.impl.kc {
		return nil
	}
	return impl
}

// sgemm is sgemmSerial's tile loop on impl with B's micro-panels taken
// from p (row stride p.impl.nr, which impl.nr divides). With narrowTail,
// the last columns go to impl's narrow implementation when they fit its
// panels (96 columns: a panel of 64 and one of 32 rather than two of 64,
// one half masked); its kernels sum each element in the same order. The
// order of the tiles differs from sgemmSerial's, not how each is computed.
func (p *PackedB) sgemm(impl *gemmImpl, narrowTail, transA bool, m, n, k int, alpha float32, a []float32, lda, j0 int, beta float32, c []float32, ldc int) {
	nPad := roundUp(p.n, p.impl.nr)
	for pc := 0; pc < k; pc += impl.kc {
		kc := min(impl.kc, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		block := p.data[pc*nPad:]
		pi := impl
		p.prepare(pi, transA, a, lda, m, pc, kc)
		for jr := 0; jr < n; jr += pi.nr {
			if narrowTail && fitsTail(pi, n-jr) {
				for fitsTail(pi, n-jr) {
					pi = pi.narrow
				}
				p.prepare(pi, transA, a, lda, m, pc, kc)
			}
			nrEff := min(pi.nr, n-jr)
			p.panel(pi, transA, m, kc, pc, nrEff, alpha, a, lda, block, j0+jr, betaEff, c[jr:], ldc)
		}
	}
}

// fitsTail reports whether the last cols columns fit the panels of
// impl's narrow implementation, with the same row blocks.
func fitsTail(impl *gemmImpl, cols int) bool {
	return impl.narrow != nil && cols <= impl.narrow.nr && impl.narrow.kc == impl.kc
}

// prepare sizes p's scratch for impl and packs A's edge panel if impl
// needs it for the rows of A's columns pc..pc+kc.
func (p *PackedB) prepare(impl *gemmImpl, transA bool, a []float32, lda, m, pc, kc int) {
	p.ws.a = grow(p.ws.a, kc*impl.mr)
	p.ws.tile = grow(p.ws.tile, impl.mr*impl.nr)
	impl.packAEdge(&p.ws, transA, a, lda, 0, m, pc, kc)
}

// panel computes the m rows of C's columns that B's columns col..col+nrEff
// (in block, the packed rows pc..pc+kc) give, tile by tile as sgemmSerial
// does.
func (p *PackedB) panel(impl *gemmImpl, transA bool, m, kc, pc, nrEff int, alpha float32, a []float32, lda int, block []float32, col int, beta float32, c []float32, ldc int) {
	ldp := p.impl.nr
	bp := &block[col/ldp*ldp*kc+col%ldp]
	for ir := 0; ir < m; ir += impl.mr {
		rows := min(impl.mr, m-ir)
		ap, aRow, aCol := tileA(impl, transA, a, lda, ir, pc, rows, &p.ws)
		impl.runTile(kc, ap, aRow, aCol, bp, ldp, c[ir*ldc:], ldc, rows, nrEff, alpha, beta, &p.ws)
	}
}
