//go:build !noasm

package kernels

// Assembly versions of the optimizer loops (optimizer_amd64.s, written by
// hand). AVX-512 runs 16 elements per instruction with the tail under a
// mask; AVX2 runs 8 and leaves the last n mod 8 elements to the Go loop.
// Both fuse multiply-adds, so results may differ from the Go reference in
// the last bit.

//go:noescape
func adamAVX512(p, grad, m, v *float32, n int, k *AdamConsts)

//go:noescape
func adadeltaAVX512(p, grad, sq, acc *float32, n int, k *AdadeltaConsts)

//go:noescape
func adamAVX2(p, grad, m, v *float32, n int, k *AdamConsts)

//go:noescape
func adadeltaAVX2(p, grad, sq, acc *float32, n int, k *AdadeltaConsts)

// newAsmOpt wraps assembly loops that handle a multiple of width elements
// (any n when width is 1); the generic loops finish the rest.
func newAsmOpt(name string, width int,
	adam func(p, grad, m, v *float32, n int, k *AdamConsts),
	adadelta func(p, grad, sq, acc *float32, n int, k *AdadeltaConsts)) *optImpl {
	return &optImpl{
		name:  name,
		width: width,
		adam: func(p, g, m, v []float32, k *AdamConsts) {
			n := len(p)
			_, _, _ = g[:n], m[:n], v[:n] // the assembly trusts n
			if vn := n &^ (width - 1); vn > 0 {
				adam(&p[0], &g[0], &m[0], &v[0], vn, k)
			}
			if vn := n &^ (width - 1); vn < n {
				adamGeneric(p[vn:], g[vn:n], m[vn:n], v[vn:n], k)
			}
		},
		adadelta: func(p, g, sq, acc []float32, k *AdadeltaConsts) {
			n := len(p)
			_, _, _ = g[:n], sq[:n], acc[:n]
			if vn := n &^ (width - 1); vn > 0 {
				adadelta(&p[0], &g[0], &sq[0], &acc[0], vn, k)
			}
			if vn := n &^ (width - 1); vn < n {
				adadeltaGeneric(p[vn:], g[vn:n], sq[vn:n], acc[vn:n], k)
			}
		},
	}
}

var (
	avx512Opt = newAsmOpt("avx512", 1, adamAVX512, adadeltaAVX512)
	avx2Opt   = newAsmOpt("avx2", 8, adamAVX2, adadeltaAVX2)
)

func defaultOpt() *optImpl {
	switch {
	case hasAVX512:
		return avx512Opt
	case hasAVX2:
		return avx2Opt
	}
	return genericOpt
}

// allArchOpts lists the assembly optimizer loops this CPU can run.
func allArchOpts() []*optImpl {
	var out []*optImpl
	if hasAVX2 {
		out = append(out, avx2Opt)
	}
	if hasAVX512 {
		out = append(out, avx512Opt)
	}
	return out
}
