//go:build !amd64 || noasm

package kernels

func rowAsm() bool { return false }

func sumSqDevAVX2(*float32, int, float32) float32 { panic("kernels: no assembly") }

func layerNormAffineAVX2(_, _, _, _ *float32, _ int, _, _ float32) { panic("kernels: no assembly") }

func layerNormGradStatsAVX2(_, _, _, _, _ *float32, _ int, _, _ float32) (float32, float32) {
	panic("kernels: no assembly")
}

func layerNormGradInputAVX2(_, _, _, _ *float32, _ int, _, _, _, _ float32, _ int) {
	panic("kernels: no assembly")
}
