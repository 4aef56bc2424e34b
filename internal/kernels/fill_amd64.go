//go:build !noasm

package kernels

//go:noescape
func fillTileAVX512(c *float32, ldc, rows int, src *float32, masks uint64)

// fillTile writes bias[:cols] into each of the first rows rows of C: with
// AVX-512 a tile row (at most 64 columns, the widest register tile) is
// four masked stores from registers loaded once, not a call to memmove.
func fillTile(c []float32, ldc, rows, cols int, bias []float32) {
	if !hasAVX512 || cols > 64 || rows == 0 || cols == 0 {
		fillTileGeneric(c, ldc, rows, cols, bias)
		return
	}
	_ = bias[cols-1]
	_ = c[(rows-1)*ldc+cols-1]
	fillTileAVX512(&c[0], ldc, rows, &bias[0], columnMasks(cols))
}
