//go:build !amd64 || noasm

package kernels

// fillTile writes bias[:cols] into each of the first rows rows of C.
func fillTile(c []float32, ldc, rows, cols int, bias []float32) {
	fillTileGeneric(c, ldc, rows, cols, bias)
}
