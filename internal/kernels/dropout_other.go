//go:build noasm || !amd64

package kernels

// dropoutMask16Vec has no vector kernel here: DropoutMask16 does every
// element.
func dropoutMask16Vec(out, x []float32, mask []byte, words []uint64, th uint32, scale float32) int {
	return 0
}

// dropoutBackward16Vec has no vector kernel here: DropoutBackward16 does
// every element.
func dropoutBackward16Vec(dx, g []float32, mask []byte, scale float32) int { return 0 }
