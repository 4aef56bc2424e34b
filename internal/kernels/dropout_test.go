package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDropoutMask16: the vector kernels give, bit for bit, the mask a
// per-element comparison gives and the products (forward and backward)
// a multiply by the float mask gives, at every length around the vector width and for thresholds at
// both ends, with NaNs, infinities and signed zeros among the inputs.
func TestDropoutMask16(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -3.5}
	for _, th := range []uint32{0, 1, 1 << 15, 49152, 65535, 1 << 16} {
		for n := 0; n <= 70; n++ {
			x := make([]float32, n)
			for i := range x {
				if i < len(special) && n%2 == 1 {
					x[i] = special[i]
				} else {
					x[i] = float32(r.NormFloat64())
				}
			}
			words := make([]uint64, (n+3)/4)
			for i := range words {
				words[i] = r.Uint64()
			}
			scale := float32(4.0 / 3)
			out, mask := make([]float32, n), make([]byte, DropoutMaskLen(n))
			for i := range mask {
				mask[i] = 0xa5 // stale bits must be overwritten
			}
			DropoutMask16(out, x, mask, words, th, scale)
			g := make([]float32, n)
			for i := range g {
				g[i] = x[(i+1)%n]
			}
			dx := make([]float32, n)
			DropoutBackward16(dx, g, mask, scale)
			for i := range x {
				var want float32
				if uint32(words[i/4]>>(16*(i%4))&0xffff) < th {
					want = scale
				}
				if m := DropoutMaskValue(mask, i, scale); math.Float32bits(m) != math.Float32bits(want) {
					t.Fatalf("th=%d n=%d: mask[%d] = %v, want %v", th, n, i, m, want)
				}
				if p := x[i] * want; math.Float32bits(out[i]) != math.Float32bits(p) {
					t.Fatalf("th=%d n=%d: out[%d] = %v, want %v", th, n, i, out[i], p)
				}
				if p := g[i] * want; math.Float32bits(dx[i]) != math.Float32bits(p) {
					t.Fatalf("th=%d n=%d: dx[%d] = %v, want %v", th, n, i, dx[i], p)
				}
			}
			for i := (n + 7) / 8; i < len(mask); i++ {
				if mask[i] != 0 {
					t.Fatalf("th=%d n=%d: mask byte %d past the elements is %#x, want 0", th, n, i, mask[i])
				}
			}
		}
	}
}

func BenchmarkDropoutMask16(b *testing.B) {
	const n = 4096
	x, out, mask := make([]float32, n), make([]float32, n), make([]byte, DropoutMaskLen(n))
	words := make([]uint64, n/4)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range words {
		words[i] = r.Uint64()
	}
	b.SetBytes(4 * n)
	for b.Loop() {
		DropoutMask16(out, x, mask, words, 49152, 4.0/3)
	}
}
