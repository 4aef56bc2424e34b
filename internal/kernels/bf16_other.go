//go:build noasm || !amd64

package kernels

// amxAvailable reports false: the AMX kernel exists only as amd64 assembly.
func amxAvailable() bool { return false }

// sgemmBF16AMX is never called when amxAvailable is false.
func sgemmBF16AMX(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("kernels: no AMX kernel in this build")
}
