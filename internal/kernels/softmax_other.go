//go:build !amd64 || noasm

package kernels

func expShiftSumAVX2(_, _ *float32, _ int, _ float32) float32 { panic("kernels: no assembly") }

func expShiftSumAVX512(_, _ *float32, _ int, _ float32) float32 { panic("kernels: no assembly") }

func maxOfAVX2(*float32, int) float32 { panic("kernels: no assembly") }

func maxOfAVX512(*float32, int) float32 { panic("kernels: no assembly") }

func subMulAVX2(_, _ *float32, _ int, _ float32) { panic("kernels: no assembly") }

func subMulAVX512(_, _ *float32, _ int, _ float32) { panic("kernels: no assembly") }

func dotAVX2(_, _ *float32, _ int) float32 { panic("kernels: no assembly") }

func dotAVX512(_, _ *float32, _ int) float32 { panic("kernels: no assembly") }
