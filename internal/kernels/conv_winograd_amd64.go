//go:build !noasm

package kernels

//go:noescape
func wgInput16AVX512(src *float32, ld int, dst *float32, stride int, mask uint64)

//go:noescape
func wgOutput16AVX512(m *float32, stride int, y *float32, ld int, rows int, masks uint64, add bool)

//go:noescape
func wgGrad16AVX512(src *float32, ld int, dst *float32, stride int, mask uint64)

func init() {
	if hasAVX512 {
		wgInput16, wgOutput16, wgGrad16 = wgInput16AVX512, wgOutput16AVX512, wgGrad16AVX512
	}
}
