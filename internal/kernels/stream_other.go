//go:build !amd64 || noasm

package kernels

// StreamCopy copies src into dst; on this platform it is copy.
func StreamCopy(dst, src []float32) { copy(dst, src) }
