//go:build !amd64 || noasm

package kernels

func rowAsm() bool { return false }

// rowAVX512 is false: there is no assembly.
const rowAVX512 = false

// The kernels layernorm.go dispatches to and layernorm_test.go compares;
// never called here (rowAsm is false, rowAVX512 too).

func sumSqDevAVX2(*float32, int, float32) float32 { panic("kernels: no assembly") }

func sumSqDevAVX512(*float32, int, float32) float32 { panic("kernels: no assembly") }

func layerNormAffineAVX2(_, _, _, _ *float32, _ int, _, _ float32) { panic("kernels: no assembly") }

func layerNormAffineAVX512(_, _, _, _ *float32, _ int, _, _ float32) { panic("kernels: no assembly") }

func layerNormGradStatsAVX2(_, _, _, _, _ *float32, _ int, _, _ float32) (float32, float32) {
	panic("kernels: no assembly")
}

func layerNormGradStatsAVX512(_, _, _, _, _ *float32, _ int, _, _ float32) (float32, float32) {
	panic("kernels: no assembly")
}

func layerNormGradInputAVX2(_, _, _, _ *float32, _ int, _, _, _, _ float32, _ int) {
	panic("kernels: no assembly")
}

func layerNormGradInputAVX512(_, _, _, _ *float32, _ int, _, _, _, _ float32, _ int) {
	panic("kernels: no assembly")
}
