//go:build !amd64 || noasm

package kernels

// PrefetchRows is a hint to bring rows of x into the cache ahead of use;
// without assembly it does nothing.
func PrefetchRows(x []float32, stride, rows, cols int) {}
