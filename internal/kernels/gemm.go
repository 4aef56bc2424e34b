package kernels

// Sgemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices, where
// op(X) is X or Xᵀ as transA/transB say. op(A) is m×k, op(B) is k×n and C is
// m×n; lda, ldb and ldc are the row strides of A, B and C as stored.
//
// Reference loop:
//
//	for i < m, j < n: c[i*ldc+j] = alpha*Σ_p opA(i,p)*opB(p,j) + beta*c[i*ldc+j]
//
// When beta is 0, C is not read (NaNs in C do not propagate).
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmGeneric(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func sgemmGeneric(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(ci)
		} else if beta != 1 {
			for j := range ci {
				ci[j] *= beta
			}
		}
		for p := 0; p < k; p++ {
			var av float32
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			av *= alpha
			if av == 0 {
				continue
			}
			if transB {
				for j := range ci {
					ci[j] += av * b[j*ldb+p]
				}
			} else {
				bp := b[p*ldb : p*ldb+n]
				for j, bv := range bp {
					ci[j] += av * bv
				}
			}
		}
	}
}
