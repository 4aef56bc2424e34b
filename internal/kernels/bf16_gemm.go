package kernels

import (
	"slices"
	"strings"
)

// SgemmBF16 computes C = alpha·op(A)·op(B) + beta·C like Sgemm, with the
// operands rounded to bfloat16 (nearest, ties to even, as RoundBF16) and
// the products accumulated in float32: the GEMM of bf16 mixed precision.
// Arguments, checks and the treatment of beta are Sgemm's; when beta is 0,
// C is not read. The result does not depend on the thread count.
//
// With NativeBF16 it runs on a bf16 kernel (BF16Kernel names it): the
// AMX tile unit (TDPBF16PS) where the CPU has AMX_BF16 and the OS grants
// the tile state, else, on CPUs with AVX512_BF16 (AMD Zen 4 and later,
// Intel Cooper Lake), VDPBF16PS on zmm registers; otherwise it is
// emulated: rounded copies of A and B multiplied by Sgemm, which gives
// the same products, summed in another order. Both kernels, like bf16
// hardware generally, treat subnormal operands as zero and flush
// subnormal sums to zero (magnitudes below 2⁻¹²⁶) whatever MXCSR says;
// the emulation keeps them. Each kernel sums in its own fixed order, so
// results may differ between the kernels in the last bits, never between
// thread counts. Products with K below 16 are emulated everywhere: the
// kernels would pad K to 32 and run slower than the float32 GEMM.
func SgemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemmArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	sgemmBF16(nativeBF16Impl(), NumThreads(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// BF16Kernel names the implementation SgemmBF16 uses here: "amx" for the
// AMX tile kernel, "avx512bf16" for the VDPBF16PS kernel, "emulated" for
// rounding plus the float32 GEMM (for labelling benchmark output).
func BF16Kernel() string { return nativeBF16Impl().String() }

// bf16Impl is one implementation of SgemmBF16.
type bf16Impl int

const (
	bf16Emulated bf16Impl = iota // rounded copies and the float32 GEMM
	bf16AMX                      // AMX tiles (TDPBF16PS)
	bf16AVX512                   // AVX512_BF16 (VDPBF16PS)
)

func (p bf16Impl) String() string {
	switch p {
	case bf16AMX:
		return "amx"
	case bf16AVX512:
		return "avx512bf16"
	}
	return "emulated"
}

// nativeBF16Impl is the implementation SgemmBF16 uses here: AMX first,
// which is several times faster where a CPU has both.
func nativeBF16Impl() bf16Impl {
	switch {
	case amxAvailable():
		return bf16AMX
	case avx512BF16Available() && dpbf16FullRate():
		return bf16AVX512
	}
	return bf16Emulated
}

// sgemmBF16 is SgemmBF16 after the argument checks, on implementation
// impl (which must be able to run here), with up to threads goroutines.
func sgemmBF16(impl bf16Impl, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	// A short K (a first convolution's 9 taps) would be padded to the
	// packed chunk's 32: the float32 GEMM on rounded operands is faster
	// there.
	if impl != bf16Emulated && k >= amxMinK {
		sgemmBF16Packed(impl == bf16AMX, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
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
	sgemmWith(gemm, threads, transA, transB, m, n, k, alpha, ra, lda, rb, ldb, beta, nil, c, ldc)
	putWorkspace(ws)
}

// amxMinK is the shortest K SgemmBF16 runs on a bf16 kernel (32 per
// packed chunk).
const amxMinK = 16

// SgemmBF16Serial is SgemmBF16 on the calling goroutine only, as
// SgemmSerial is Sgemm: for callers that spread independent products over
// their own goroutines.
func SgemmBF16Serial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemmArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	sgemmBF16(nativeBF16Impl(), 1, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// BF16Missing says, for an error message, why SgemmBF16 has no native
// kernel here: the CPU has neither AMX_BF16 nor AVX512_BF16, the OS
// refused the AMX tile state (on a CPU without AVX512_BF16 to fall back
// on), or the instructions are there but not the AVX-512 support the
// kernels need. Empty when NativeBF16.
func BF16Missing() string {
	switch f := BF16Features(); {
	case NativeBF16():
		return ""
	case slices.Contains(f, "AMX_BF16"):
		return "this CPU has AMX_BF16 but the kernel did not grant this process the AMX tile state"
	case avx512BF16Available():
		return "this CPU has AVX512_BF16 but no AMX_BF16, and its cores issue VDPBF16PS too slowly for a bf16 kernel faster than fp32 (gotrain's bf16 needs AMX_BF16, or AVX512_BF16 on AMD Zen 4 or later)"
	case len(f) > 0:
		return "this CPU has " + strings.Join(f, " and ") + " but not the AVX-512F/BW support gotrain's bf16 kernels need with it (AMX_BF16, or AVX512_BF16 on AMD Zen 4 or later)"
	}
	return "this CPU lacks AMX_BF16 and AVX512_BF16, one of which gotrain's bf16 kernels need (AMX_BF16, or AVX512_BF16 on AMD Zen 4 or later)"
}
