//go:build !noasm

package kernels

import "unsafe"

//go:noescape
func streamCopyAVX512(dst, src *float32, n int)

// StreamCopy copies src into dst (which must be at least as long) like
// copy, but with non-temporal stores where it can: the data goes to memory
// instead of this core's cache, which suits a buffer another core reads
// next (shared-memory collectives). Short copies, unaligned destinations
// and CPUs without AVX-512 use copy.
func StreamCopy(dst, src []float32) {
	n := len(src)
	if n < 1024 || !hasAVX512 || uintptr(unsafe.Pointer(&dst[0]))%64 != 0 {
		copy(dst, src)
		return
	}
	_ = dst[n-1]
	body := n &^ 63
	streamCopyAVX512(&dst[0], &src[0], body)
	copy(dst[body:n], src[body:])
}
