package kernels

import "fmt"

// The transforms of Winograd F(2×2, 3×3) convolution, a block row at a
// time: a block is the 4×4 input pixels under a 2×2 block of output
// pixels, the blocks of a row two pixels apart. With AVX-512 they run 16
// blocks per step (conv_winograd_amd64.s), else in Go.

// WinogradSlack is how many elements past the last one the transforms
// may read (and ignore) after an input block row or a row of transformed
// values: they read 16 blocks at a time.
const WinogradSlack = 32

// WinogradInputRow writes the transforms Bᵀ·D·B, with Bᵀ = [1 0 −1 0;
// 0 1 1 0; 0 −1 1 0; 0 1 0 −1], of blocks 0…blocks−1 of the block row at
// src into dst: value ξ = 4i + j of block k at dst[ξ·stride + k]. Block k
// is src[r·ld + 2k + j] for r, j < 4. src must hold WinogradSlack
// elements past the last block's last.
func WinogradInputRow(dst []float32, stride int, src []float32, ld, blocks int) {
	if blocks <= 0 {
		return
	}
	if stride < blocks || ld < 2*blocks+2 || len(dst) < 15*stride+blocks || len(src) < 3*ld+2*blocks+2+WinogradSlack {
		panic(fmt.Sprintf("kernels: WinogradInputRow: %d blocks do not fit (stride %d, ld %d, len %d, %d)", blocks, stride, ld, len(dst), len(src)))
	}
	if wgInput16 == nil {
		winogradInputRowGo(dst, stride, src, ld, blocks)
		return
	}
	for k := 0; k < blocks; k += 16 {
		wgInput16(&src[2*k], ld, &dst[k], stride, uint64(colMask(min(16, blocks-k))))
	}
}

// WinogradOutputRow sets (add false) or adds to (add true) the output
// pixels Aᵀ·M·A, with Aᵀ = [1 1 1 0; 0 1 −1 −1], of the blocks of one
// block row: y[r·ld + x] for r < rows (1 or 2, the block row's pixel rows
// inside the plane) and x < cols, from the transformed sums of block
// x/2, value ξ at m[ξ·stride + x/2]. m must hold WinogradSlack elements
// past the last block's last value.
func WinogradOutputRow(y []float32, ld, rows, cols int, m []float32, stride int, add bool) {
	if cols <= 0 {
		return
	}
	blocks := (cols + 1) / 2
	if rows < 1 || rows > 2 || ld < cols || stride < blocks || len(y) < (rows-1)*ld+cols || len(m) < 15*stride+blocks+WinogradSlack {
		panic(fmt.Sprintf("kernels: WinogradOutputRow: %d rows of %d do not fit (ld %d, stride %d, len %d, %d)", rows, cols, ld, stride, len(y), len(m)))
	}
	if wgOutput16 == nil {
		winogradOutputRowGo(y, ld, rows, cols, m, stride, add)
		return
	}
	for k := 0; k < blocks; k += 16 {
		x := 2 * k
		wgOutput16(&m[k], stride, &y[x], ld, rows, colMask(min(32, cols-x)), add)
	}
}

// WinogradGradRow writes the transforms A·G·Aᵀ, with Aᵀ = [1 1 1 0;
// 0 1 −1 −1], of the output-gradient blocks 0…blocks−1 of the block row
// at src into dst: value ξ = 4i + j of block k at dst[ξ·stride + k]. Block
// k is src[r·ld + 2k + j] for r, j < 2. src must hold WinogradSlack
// elements past the last block's last. (The weight gradient of a Winograd
// convolution: Gᵀ·(Σ A·G·Aᵀ ⊙ Bᵀ·D·B)·G over the blocks.)
func WinogradGradRow(dst []float32, stride int, src []float32, ld, blocks int) {
	if blocks <= 0 {
		return
	}
	if stride < blocks || ld < 2*blocks || len(dst) < 15*stride+blocks || len(src) < ld+2*blocks+WinogradSlack {
		panic(fmt.Sprintf("kernels: WinogradGradRow: %d blocks do not fit (stride %d, ld %d, len %d, %d)", blocks, stride, ld, len(dst), len(src)))
	}
	if wgGrad16 == nil {
		winogradGradRowGo(dst, stride, src, ld, blocks)
		return
	}
	for k := 0; k < blocks; k += 16 {
		wgGrad16(&src[2*k], ld, &dst[k], stride, uint64(colMask(min(16, blocks-k))))
	}
}

// wgInput16 and wgOutput16 run 16 blocks, those the mask selects, where
// the CPU has the kernels (nil otherwise).
var (
	wgInput16  func(src *float32, ld int, dst *float32, stride int, mask uint64)
	wgOutput16 func(m *float32, stride int, y *float32, ld int, rows int, masks uint64, add bool)
	wgGrad16   func(src *float32, ld int, dst *float32, stride int, mask uint64)
)

func winogradGradRowGo(dst []float32, stride int, src []float32, ld, blocks int) {
	r0, r1 := src, src[ld:]
	for k := range blocks {
		x := 2 * k
		var h [2][4]float32 // row r: G·Aᵀ
		for r, row := range [2][]float32{r0[x : x+2], r1[x : x+2]} {
			h[r] = [4]float32{row[0], row[0] + row[1], row[0] - row[1], 0 - row[1]}
		}
		for j := range 4 {
			dst[j*stride+k] = h[0][j]
			dst[(4+j)*stride+k] = h[0][j] + h[1][j]
			dst[(8+j)*stride+k] = h[0][j] - h[1][j]
			dst[(12+j)*stride+k] = 0 - h[1][j]
		}
	}
}

func winogradInputRowGo(dst []float32, stride int, src []float32, ld, blocks int) {
	r0, r1, r2, r3 := src, src[ld:], src[2*ld:], src[3*ld:]
	for k := range blocks {
		x := 2 * k
		var c [4][4]float32 // row r: D·B
		for r, row := range [4][]float32{r0[x : x+4], r1[x : x+4], r2[x : x+4], r3[x : x+4]} {
			c[r] = [4]float32{row[0] - row[2], row[1] + row[2], row[2] - row[1], row[1] - row[3]}
		}
		for j := range 4 {
			dst[j*stride+k] = c[0][j] - c[2][j]
			dst[(4+j)*stride+k] = c[1][j] + c[2][j]
			dst[(8+j)*stride+k] = c[2][j] - c[1][j]
			dst[(12+j)*stride+k] = c[1][j] - c[3][j]
		}
	}
}

func winogradOutputRowGo(y []float32, ld, rows, cols int, m []float32, stride int, add bool) {
	for x := range cols {
		k, dx := x/2, x%2
		var b [4]float32 // M·A, column dx
		for i := range 4 {
			m0, m1, m2, m3 := m[(4*i)*stride+k], m[(4*i+1)*stride+k], m[(4*i+2)*stride+k], m[(4*i+3)*stride+k]
			if dx == 0 {
				b[i] = m0 + m1 + m2
			} else {
				b[i] = m1 - m2 - m3
			}
		}
		for r := range rows {
			v := b[0] + b[1] + b[2]
			if r == 1 {
				v = b[1] - b[2] - b[3]
			}
			if add {
				y[r*ld+x] += v
			} else {
				y[r*ld+x] = v
			}
		}
	}
}
