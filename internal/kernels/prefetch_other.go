//go:build !amd64 || noasm

package kernels

// Prefetch is a hint to bring x into cache ahead of use; on this platform
// it does nothing.
func Prefetch(x []float32) {}
