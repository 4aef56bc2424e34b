//go:build !noasm

package kernels

import "unsafe"

//go:noescape
func prefetchRows(p *float32, stride, rows, lines int)

// PrefetchRows asks the CPU to bring rows rows of cols floats of x, row
// r starting at x[r*stride], into its cache ahead of use. It reads
// nothing: a hint, with no effect on results.
func PrefetchRows(x []float32, stride, rows, cols int) {
	if rows <= 0 || cols <= 0 || len(x) < (rows-1)*stride+cols {
		return
	}
	// Lines from the one holding x[0] to the one holding x[cols-1]; the
	// first address may be inside its line, which prefetches the line.
	skew := int(uintptr(unsafe.Pointer(&x[0])) % 64)
	prefetchRows(&x[0], stride, rows, (skew+4*cols+63)/64)
}
