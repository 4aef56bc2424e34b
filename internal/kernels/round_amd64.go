//go:build !noasm

package kernels

//go:noescape
func roundBF16AVX512(dst, src *float32, n int)

// roundBF16Vec rounds the longest prefix of src it can with AVX-512 into
// dst and returns how many values it did.
func roundBF16Vec(dst, src []float32) int {
	n := len(src) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	roundBF16AVX512(&dst[0], &src[0], n)
	return n
}
