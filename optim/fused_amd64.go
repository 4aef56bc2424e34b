//go:build !noasm

package optim

import "golang.org/x/sys/cpu"

// Assembly versions of the fused loops (fused_amd64.s). AVX-512 runs 16
// elements per instruction with the tail under a mask; AVX2 runs 8 and
// leaves the last n mod 8 elements to the Go loop. Both fuse multiply-adds,
// so results may differ from the Go reference in the last bit.

//go:noescape
func adamAVX512(p, grad, m, v *float32, n int, k *adamConsts)

//go:noescape
func adadeltaAVX512(p, grad, sq, acc *float32, n int, k *adadeltaConsts)

//go:noescape
func adamAVX2(p, grad, m, v *float32, n int, k *adamConsts)

//go:noescape
func adadeltaAVX2(p, grad, sq, acc *float32, n int, k *adadeltaConsts)

// asmFused wraps assembly loops that handle a multiple of width elements
// (any n when width is 1).
func asmFused(name string, width int,
	adam func(p, grad, m, v *float32, n int, k *adamConsts),
	adadelta func(p, grad, sq, acc *float32, n int, k *adadeltaConsts)) fusedImpl {
	return fusedImpl{
		name: name,
		adam: func(p, g, m, v []float32, k *adamConsts) {
			n := len(p)
			_, _, _ = g[:n], m[:n], v[:n] // the assembly trusts n
			if vn := n &^ (width - 1); vn > 0 {
				adam(&p[0], &g[0], &m[0], &v[0], vn, k)
			}
			if vn := n &^ (width - 1); vn < n {
				adamFusedGeneric(p[vn:], g[vn:n], m[vn:n], v[vn:n], k)
			}
		},
		adadelta: func(p, g, sq, acc []float32, k *adadeltaConsts) {
			n := len(p)
			_, _, _ = g[:n], sq[:n], acc[:n]
			if vn := n &^ (width - 1); vn > 0 {
				adadelta(&p[0], &g[0], &sq[0], &acc[0], vn, k)
			}
			if vn := n &^ (width - 1); vn < n {
				adadeltaFusedGeneric(p[vn:], g[vn:n], sq[vn:n], acc[vn:n], k)
			}
		},
	}
}

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		fusedImpls = append(fusedImpls, asmFused("avx2", 8, adamAVX2, adadeltaAVX2))
	}
	if cpu.X86.HasAVX512F {
		fusedImpls = append(fusedImpls, asmFused("avx512", 1, adamAVX512, adadeltaAVX512))
	}
	best := fusedImpls[len(fusedImpls)-1]
	adamFused, adadeltaFused = best.adam, best.adadelta
}
