//go:build !noasm

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bf16SpecialBits are float32 bit patterns at the edges of bf16 rounding.
var bf16SpecialBits = []uint32{
	0, 0x80000000, // ±0
	0x00000001, 0x80000001, 0x00007fff, 0x00008000, 0x00018000, 0x007fffff, 0x807fffff, // subnormals, ties among them
	0x00800000, 0x3f800000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, // ties to even and near them
	0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7fffff, 0x7f7effff, // near the largest finite
	0x7f800000, 0xff800000, // ±Inf
	0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0xff800001, 0x7fffffff, 0x7f80ffff, // NaNs, signalling and quiet
}

// bf16TestValues returns n float32 values: the special patterns, then
// random bits (every exponent, NaNs included).
func bf16TestValues(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		if i < len(bf16SpecialBits) {
			x[i] = math.Float32frombits(bf16SpecialBits[i])
			continue
		}
		x[i] = math.Float32frombits(r.Uint32())
	}
	r.Shuffle(len(x), func(i, j int) { x[i], x[j] = x[j], x[i] })
	return x
}

// TestBF16PackRounding: the assembly's rounding equals RoundBF16Bits bit
// for bit (NaN payloads included) in both packing loops, and masked
// columns and missing rows come out zero.
func TestBF16PackRounding(t *testing.T) {
	if !hasAVX512 || (!amxAvailable() && !avx512BF16Available()) {
		t.Skip("no bf16 kernel (nor its packing) here")
	}
	r := rand.New(rand.NewPCG(1, 5))
	const ld = 37
	tile := make([]uint16, amxTile)
	for iter := 0; iter < 200; iter++ {
		src := bf16TestValues(r, 32*ld)
		rows, cols := 1+iter%16, 1+iter*7%32
		if iter%3 == 0 {
			rows, cols = 16, 32
		}
		bf16RoundRows(&tile[0], &src[0], ld, rows, mask32(cols))
		for i := 0; i < 16; i++ {
			for j := 0; j < 32; j++ {
				want := uint16(0)
				if i < rows && j < cols {
					want = RoundBF16Bits(math.Float32bits(src[i*ld+j]))
				}
				if got := tile[i*32+j]; got != want {
					t.Fatalf("bf16RoundRows rows=%d cols=%d [%d,%d] of %#x: %#04x, want %#04x", rows, cols, i, j, math.Float32bits(src[i*ld+j]), got, want)
				}
			}
		}
		prows, pcols := 1+iter%32, 1+iter*5%16
		if iter%3 == 0 {
			prows, pcols = 32, 16
		}
		bf16RoundPairs(&tile[0], &src[0], ld, prows, mask32(pcols))
		for rr := 0; rr < 16; rr++ {
			for j := 0; j < 16; j++ {
				for q := 0; q < 2; q++ {
					p := 2*rr + q
					want := uint16(0)
					if p < prows && j < pcols {
						want = RoundBF16Bits(math.Float32bits(src[p*ld+j]))
					}
					if got := tile[rr*32+2*j+q]; got != want {
						t.Fatalf("bf16RoundPairs rows=%d cols=%d [%d,%d,%d]: %#04x, want %#04x", prows, pcols, rr, j, q, got, want)
					}
				}
			}
		}
	}
}

// TestBF16PackLayout compares packAPanels and packBPanels, every transpose
// case and edge, with the layout written out element by element.
func TestBF16PackLayout(t *testing.T) {
	if !hasAVX512 || (!amxAvailable() && !avx512BF16Available()) {
		t.Skip("no bf16 kernel (nor its packing) here")
	}
	r := rand.New(rand.NewPCG(2, 5))
	for _, k := range []int{1, 31, 32, 33, 70} {
		for _, cnt := range []int{1, 15, 16, 17, 32} {
			for _, tr := range []bool{false, true} {
				steps := (k + 31) / 32
				const off, pad = 3, 5 // panel starts at row/column off of a larger matrix
				// op(X) is (off+cnt)×k for A, k×(off+cnt) for B.
				rowsA, colsA := off+cnt, k
				if tr {
					rowsA, colsA = k, off+cnt
				}
				lda := colsA + pad
				x := bf16TestValues(r, rowsA*lda)
				opA := func(i, p int) float32 {
					if tr {
						return x[p*lda+i]
					}
					return x[i*lda+p]
				}
				got := make([]uint16, steps*amxChunk)
				for i := range got {
					got[i] = 0xdead // every element must be written
				}
				packAPanels(got, tr, x, lda, k, off, cnt)
				for kk := 0; kk < steps; kk++ {
					for i := 0; i < 32; i++ {
						for p := 0; p < 32; p++ {
							want := uint16(0)
							if i < cnt && 32*kk+p < k {
								want = RoundBF16Bits(math.Float32bits(opA(off+i, 32*kk+p)))
							}
							if g := got[kk*amxChunk+i*32+p]; g != want {
								t.Fatalf("packAPanels trans=%v k=%d rows=%d chunk %d [%d,%d]: %#04x, want %#04x", tr, k, cnt, kk, i, p, g, want)
							}
						}
					}
				}
				// The same matrix read as B: op(B) = x as k×(off+cnt) when
				// transposed storage is (off+cnt)×k, and vice versa.
				trB := !tr
				opB := func(p, j int) float32 {
					if trB {
						return x[j*lda+p]
					}
					return x[p*lda+j]
				}
				for i := range got {
					got[i] = 0xdead
				}
				packBPanels(got, trB, x, lda, k, off, cnt)
				for kk := 0; kk < steps; kk++ {
					for h := 0; h < 2; h++ {
						for rr := 0; rr < 16; rr++ {
							for j := 0; j < 16; j++ {
								for q := 0; q < 2; q++ {
									p, col := 32*kk+2*rr+q, 16*h+j
									want := uint16(0)
									if col < cnt && p < k {
										want = RoundBF16Bits(math.Float32bits(opB(p, off+col)))
									}
									if g := got[kk*amxChunk+h*amxTile+rr*32+2*j+q]; g != want {
										t.Fatalf("packBPanels trans=%v k=%d cols=%d chunk %d tile %d [%d,%d,%d]: %#04x, want %#04x", trB, k, cnt, kk, h, rr, j, q, g, want)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}
