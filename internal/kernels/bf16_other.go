//go:build noasm || !amd64

package kernels

// amxAvailable reports false: the AMX kernel exists only as amd64 assembly.
func amxAvailable() bool { return false }

// avx512BF16Available reports false: so does the AVX512_BF16 kernel.
func avx512BF16Available() bool { return false }

// sgemmBF16Packed is never called when both report false.
func sgemmBF16Packed(amx bool, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("kernels: no bf16 kernel in this build")
}

// dpbf16FullRate reports false: there is no AVX512_BF16 kernel here.
func dpbf16FullRate() bool { return false }
