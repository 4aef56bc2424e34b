package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDropoutMask16: the vector kernel gives, bit for bit, the mask a
// per-element comparison gives and the product a separate multiply
// gives, at every length around the vector width and for thresholds at
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
			out, mask := make([]float32, n), make([]float32, n)
			DropoutMask16(out, mask, x, words, th, scale)
			for i := range x {
				var want float32
				if uint32(words[i/4]>>(16*(i%4))&0xffff) < th {
					want = scale
				}
				if math.Float32bits(mask[i]) != math.Float32bits(want) {
					t.Fatalf("th=%d n=%d: mask[%d] = %v, want %v", th, n, i, mask[i], want)
				}
				if p := x[i] * want; math.Float32bits(out[i]) != math.Float32bits(p) {
					t.Fatalf("th=%d n=%d: out[%d] = %v, want %v", th, n, i, out[i], p)
				}
			}
		}
	}
}

func BenchmarkDropoutMask16(b *testing.B) {
	const n = 4096
	x, out, mask := make([]float32, n), make([]float32, n), make([]float32, n)
	words := make([]uint64, n/4)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range words {
		words[i] = r.Uint64()
	}
	b.SetBytes(4 * n)
	for b.Loop() {
		DropoutMask16(out, mask, x, words, 49152, 4.0/3)
	}
}
