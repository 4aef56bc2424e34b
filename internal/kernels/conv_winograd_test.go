package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestWinogradRows checks the transforms (AVX-512 where the CPU has it)
// against the Go loops, bit for bit (both add in the same order), on block
// rows shorter than, equal to and longer than 16 blocks, odd widths, one
// and two pixel rows, set and add; and that nothing outside the wanted
// elements is written.
func TestWinogradRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, blocks := range []int{1, 2, 15, 16, 17, 33, 63} {
		ld := 2*blocks + 2 + 3
		src := uniformSlice(rng, 4*ld+WinogradSlack)
		stride := blocks + 5
		want := make([]float32, 16*stride+WinogradSlack)
		got := make([]float32, len(want))
		for i := range want {
			want[i] = -7
			got[i] = -7
		}
		winogradInputRowGo(want, stride, src, ld, blocks)
		WinogradInputRow(got, stride, src, ld, blocks)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("input, %d blocks: dst[%d] = %v, want %v", blocks, i, got[i], want[i])
			}
		}
		for i := range want {
			want[i] = -7
			got[i] = -7
		}
		winogradGradRowGo(want, stride, src, ld, blocks)
		WinogradGradRow(got, stride, src, ld, blocks)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("gradient, %d blocks: dst[%d] = %v, want %v", blocks, i, got[i], want[i])
			}
		}
		m := uniformSlice(rng, 16*stride+WinogradSlack)
		for _, cols := range []int{2*blocks - 1, 2 * blocks} {
			for rows := 1; rows <= 2; rows++ {
				for _, add := range []bool{false, true} {
					name := fmt.Sprintf("output, %d cols, %d rows, add %v", cols, rows, add)
					yld := cols + 3
					y0 := uniformSlice(rng, 2*yld+8)
					want, got := append([]float32(nil), y0...), append([]float32(nil), y0...)
					winogradOutputRowGo(want, yld, rows, cols, m, stride, add)
					WinogradOutputRow(got, yld, rows, cols, m, stride, add)
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%s: y[%d] = %v, want %v", name, i, got[i], want[i])
						}
						if r, x := i/yld, i%yld; (r >= rows || x >= cols) && got[i] != y0[i] {
							t.Fatalf("%s: y[%d] outside the rows written", name, i)
						}
					}
				}
			}
		}
	}
}

// TestWinogradRowsTransform checks the Go loops against the transforms'
// definition on one block: Bᵀ·D·B, A·G·Aᵀ and Aᵀ·M·A.
func TestWinogradRowsTransform(t *testing.T) {
	bt := [4][4]float32{{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}}
	at := [2][4]float32{{1, 1, 1, 0}, {0, 1, -1, -1}}
	rng := rand.New(rand.NewPCG(33, 34))
	d := uniformSlice(rng, 4*4+WinogradSlack)
	v := make([]float32, 16+WinogradSlack)
	WinogradInputRow(v, 1, d, 4, 1)
	for i := range 4 {
		for j := range 4 {
			var s float64
			for r := range 4 {
				for c := range 4 {
					s += float64(bt[i][r] * d[4*r+c] * bt[j][c])
				}
			}
			if diff := float64(v[4*i+j]) - s; diff > 1e-6 || diff < -1e-6 {
				t.Fatalf("V[%d][%d] = %v, want %v", i, j, v[4*i+j], s)
			}
		}
	}
	a := [4][2]float32{{1, 0}, {1, 1}, {1, -1}, {0, -1}} // A = (Aᵀ)ᵀ
	g := uniformSlice(rng, 2*2+WinogradSlack)
	gv := make([]float32, 16+WinogradSlack)
	WinogradGradRow(gv, 1, g, 2, 1)
	for i := range 4 {
		for j := range 4 {
			var s float64
			for r := range 2 {
				for c := range 2 {
					s += float64(a[i][r] * g[2*r+c] * a[j][c])
				}
			}
			if diff := float64(gv[4*i+j]) - s; diff > 1e-6 || diff < -1e-6 {
				t.Fatalf("A·G·Aᵀ[%d][%d] = %v, want %v", i, j, gv[4*i+j], s)
			}
		}
	}
	m := uniformSlice(rng, 16+WinogradSlack)
	y := make([]float32, 4)
	WinogradOutputRow(y, 2, 2, 2, m, 1, false)
	for i := range 2 {
		for j := range 2 {
			var s float64
			for r := range 4 {
				for c := range 4 {
					s += float64(at[i][r] * m[4*r+c] * at[j][c])
				}
			}
			if diff := float64(y[2*i+j]) - s; diff > 1e-5 || diff < -1e-5 {
				t.Fatalf("Y[%d][%d] = %v, want %v", i, j, y[2*i+j], s)
			}
		}
	}
}
