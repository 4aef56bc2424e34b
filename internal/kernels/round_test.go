package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRoundBF16Vector: RoundBF16 (vectorised where the CPU allows) gives
// RoundBF16Bits's value for every element, over random bit patterns
// (NaNs and infinities among them), ties, subnormals and the largest
// finite values, at every length around the vector width, in place too.
func TestRoundBF16Vector(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	special := []uint32{0, 0x80000000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x00000001, 0x807fffff,
		0x7f7fffff, 0xff7f8000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff, 0x7fff8000}
	for n := 0; n <= 70; n++ {
		src := make([]float32, n)
		for i := range src {
			if i < len(special) && n%2 == 0 {
				src[i] = math.Float32frombits(special[i])
			} else {
				src[i] = math.Float32frombits(r.Uint32())
			}
		}
		dst := make([]float32, n)
		RoundBF16(dst, src)
		in := append([]float32(nil), src...)
		RoundBF16(in, in)
		for i, v := range src {
			want := uint32(RoundBF16Bits(math.Float32bits(v))) << 16
			if got := math.Float32bits(dst[i]); got != want {
				t.Fatalf("n=%d: RoundBF16(%#08x) = %#08x, want %#08x", n, math.Float32bits(v), got, want)
			}
			if got := math.Float32bits(in[i]); got != want {
				t.Fatalf("n=%d in place: RoundBF16(%#08x) = %#08x, want %#08x", n, math.Float32bits(v), got, want)
			}
		}
	}
}

func BenchmarkRoundBF16(b *testing.B) {
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = float32(i) * 1.001
	}
	dst := make([]float32, len(src))
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		RoundBF16(dst, src)
	}
}
