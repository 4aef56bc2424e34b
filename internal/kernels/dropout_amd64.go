//go:build !noasm

package kernels

//go:noescape
func dropoutMask16AVX512(out, mask, x *float32, draws *uint64, n int, th uint32, scale float32)

// dropoutMask16Vec does the longest prefix of DropoutMask16 it can with
// AVX-512 and returns how many elements it did.
func dropoutMask16Vec(out, mask, x []float32, words []uint64, th uint32, scale float32) int {
	n := len(x) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	dropoutMask16AVX512(&out[0], &mask[0], &x[0], &words[0], n, th, scale)
	return n
}
