package checkpoint

import (
	"encoding/binary"
	"unsafe"
)

// nativeLittleEndian reports whether float32 slices are already laid out
// as safetensors stores them, so their bytes can be written and read
// directly instead of one element at a time.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// float32Bytes returns the memory of x as bytes (no copy).
func float32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}
