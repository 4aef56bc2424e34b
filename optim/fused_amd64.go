//go:build !noasm

package optim

import "golang.org/x/sys/cpu"

// AVX-512 versions of the fused loops (fused_amd64.s): 16 elements per
// instruction, the tail under a mask, so every element of a parameter goes
// through the same instructions wherever it falls. They fuse multiply-adds,
// so results may differ from the Go reference in the last bit.

//go:noescape
func adamAVX512(p, grad, m, v *float32, n int, k *adamConsts)

//go:noescape
func adadeltaAVX512(p, grad, sq, acc *float32, n int, k *adadeltaConsts)

func init() {
	if !cpu.X86.HasAVX512F {
		return
	}
	adamFused = func(p, g, m, v []float32, k *adamConsts) {
		n := len(p)
		if n == 0 {
			return
		}
		_, _, _ = g[n-1], m[n-1], v[n-1] // the assembly trusts n
		adamAVX512(&p[0], &g[0], &m[0], &v[0], n, k)
	}
	adadeltaFused = func(p, g, sq, acc []float32, k *adadeltaConsts) {
		n := len(p)
		if n == 0 {
			return
		}
		_, _, _ = g[n-1], sq[n-1], acc[n-1]
		adadeltaAVX512(&p[0], &g[0], &sq[0], &acc[0], n, k)
	}
}
