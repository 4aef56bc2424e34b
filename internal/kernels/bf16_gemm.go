package kernels

// SgemmBF16 computes C = alpha·op(A)·op(B) + beta·C like Sgemm, with the
// operands rounded to bfloat16 (nearest, ties to even, as RoundBF16) and
// the products accumulated in float32: the GEMM of bf16 mixed precision.
// Arguments, checks and the treatment of beta are Sgemm's; when beta is 0,
// C is not read. The result does not depend on the thread count.
//
// With NativeBF16 it runs on the AMX tile unit (TDPBF16PS), otherwise it
// is emulated: rounded copies of A and B multiplied by Sgemm, which gives
// the same products, summed in another order. The AMX unit, like bf16
// hardware generally, treats subnormal operands as zero and flushes
// subnormal sums to zero (magnitudes below 2⁻¹²⁶); the emulation keeps
// them. Products with K below 16 are emulated everywhere: the tiles would
// pad K to 32 and run slower than the float32 GEMM.
func SgemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemmArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	sgemmBF16(amxAvailable(), NumThreads(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// BF16Kernel names the implementation SgemmBF16 uses here: "amx" for the
// AMX tile kernel, "emulated" for rounding plus the float32 GEMM (for
// labelling benchmark output).
func BF16Kernel() string {
	if NativeBF16() {
		return "amx"
	}
	return "emulated"
}

// sgemmBF16 is SgemmBF16 after the argument checks, on the AMX kernel
// when native is set, with up to threads goroutines.
func sgemmBF16(native bool, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	// A short K (a first convolution's 9 taps) would be padded to the
	// tile's 32: the float32 GEMM on rounded operands is faster there.
	if native && k >= amxMinK {
		sgemmBF16AMX(threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	ws := getWorkspace()
	na, nb := (ar-1)*lda+ac, (br-1)*ldb+bc
	ws.swap = grow(ws.swap, na+nb)
	ra, rb := ws.swap[:na], ws.swap[na:na+nb]
	// The gaps between rows are rounded too, which costs little and keeps
	// each copy one RoundBF16 call.
	RoundBF16(ra, a[:na])
	RoundBF16(rb, b[:nb])
	sgemmWith(gemm, threads, transA, transB, m, n, k, alpha, ra, lda, rb, ldb, beta, c, ldc)
	putWorkspace(ws)
}

// amxMinK is the shortest K SgemmBF16 runs on AMX tiles (32 per step).
const amxMinK = 16
