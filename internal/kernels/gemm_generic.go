package kernels

import "unsafe"

// microGeneric is the portable micro-kernel for genericGemm (mr=4, nr=16).
// Four rows of accumulators live in fixed-size arrays so the compiler
// drops bounds checks in the inner loop.
func microGeneric(k int, a *float32, aRow, aCol int, b *float32, bRow int, c *float32, ldc int, alpha, beta float32, _ uint64) {
	const mr, nr = 4, 16
	if k == 0 {
		return
	}
	ap := unsafe.Slice(a, (mr-1)*aRow+(k-1)*aCol+1)
	bp := unsafe.Slice(b, (k-1)*bRow+nr)
	var c0, c1, c2, c3 [nr]float32
	for p := 0; p < k; p++ {
		bv := (*[nr]float32)(bp[p*bRow:])
		o := p * aCol
		a0, a1, a2, a3 := ap[o], ap[o+aRow], ap[o+2*aRow], ap[o+3*aRow]
		for j, x := range bv {
			c0[j] += a0 * x
			c1[j] += a1 * x
			c2[j] += a2 * x
			c3[j] += a3 * x
		}
	}
	cs := unsafe.Slice(c, (mr-1)*ldc+nr)
	for i, acc := range [...]*[nr]float32{&c0, &c1, &c2, &c3} {
		row := cs[i*ldc : i*ldc+nr]
		if beta == 0 {
			for j, v := range acc {
				row[j] = alpha * v
			}
		} else {
			for j, v := range acc {
				row[j] = alpha*v + beta*row[j]
			}
		}
	}
}
