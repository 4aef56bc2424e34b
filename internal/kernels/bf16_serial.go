package kernels

import (
	"slices"
	"strings"
)

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
