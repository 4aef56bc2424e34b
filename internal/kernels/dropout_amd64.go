//go:build !noasm

package kernels

//go:noescape
func dropoutMask16AVX512(out, x *float32, mask *byte, draws *uint64, n int, th uint32, scale float32)

//go:noescape
func dropoutBackward16AVX512(dst, grad *float32, mask *byte, n int, scale float32)

// dropoutMask16Vec does the longest prefix of DropoutMask16 it can with
// AVX-512 (a multiple of 16 elements) and returns how many it did.
func dropoutMask16Vec(out, x []float32, mask []byte, words []uint64, th uint32, scale float32) int {
	n := len(x) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	dropoutMask16AVX512(&out[0], &x[0], &mask[0], &words[0], n, th, scale)
	return n
}

// dropoutBackward16Vec does the longest prefix of DropoutBackward16 it
// can with AVX-512 and returns how many elements it did.
func dropoutBackward16Vec(dx, g []float32, mask []byte, scale float32) int {
	n := len(g) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	dropoutBackward16AVX512(&dx[0], &g[0], &mask[0], n, scale)
	return n
}
