//go:build noasm || !amd64

package kernels

// dropoutMask16Vec has no vector kernel here: DropoutMask16 does every
// element.
func dropoutMask16Vec(out, mask, x []float32, words []uint64, th uint32, scale float32) int {
	return 0
}
