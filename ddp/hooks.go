package ddp

import (
	"context"
	"math"
	"sync"
	"unsafe"

	"github.com/gotrain/gotrain/distributed"
)

// Group is what DDP needs of a process group; *distributed.Group implements it.
type Group interface {
	Rank() int
	Size() int
	// SharedMemory reports whether every rank runs on this host and
	// reduces through shared memory, so that a reduction is CPU work
	// competing with the ranks' compute (see OverlapComm).
	SharedMemory() bool
	AllReduce(ctx context.Context, buf any, op distributed.ReduceOp) error
	Broadcast(ctx context.Context, buf any, root int) error
	AllGather(ctx context.Context, dst, src any) error
}

// CommHook reduces one bucket of gradients across the group. On a nil
// return, bucket must hold the gradient averaged over all ranks, identical
// on every rank. Hooks run on DDP's communication goroutine, one bucket at a
// time in bucket order, while backward goes on (or, when DDP does not
// overlap, in the grad hooks themselves: see OverlapComm); the hook must not
// retain bucket after returning.
type CommHook func(ctx context.Context, g Group, bucket []float32) error

// AllReduceHook is the default hook: allreduce-average in float32, like
// PyTorch's default. The division by the world size is done by the
// allreduce on each rank's share of the sum, a pass over 1/n of the bucket
// instead of all of it before sending (PyTorch divides first to keep fp16
// from overflowing, which float32 gradients do not need).
func AllReduceHook(ctx context.Context, g Group, bucket []float32) error {
	return g.AllReduce(ctx, bucket, distributed.Avg)
}

// FP16CompressHook sends gradients as IEEE half precision, halving the bytes
// on the wire (PyTorch's fp16_compress_hook). Each rank's scaled gradients
// are rounded to fp16 and gathered; every rank sums the decoded values in
// rank order in float32, so the result is identical on all ranks.
func FP16CompressHook(ctx context.Context, g Group, bucket []float32) error {
	return compressedHook(ctx, g, bucket, encodeFP16, decodeAddFP16)
}

// BF16CompressHook is FP16CompressHook with bfloat16: the same range as
// float32 (no overflow) with 8 bits of mantissa.
func BF16CompressHook(ctx context.Context, g Group, bucket []float32) error {
	return compressedHook(ctx, g, bucket, encodeBF16, decodeAddBF16)
}

// compressScratch recycles the gather buffers of the compression hooks,
// which run once per bucket per step.
var compressScratch sync.Pool

func getWords(n int) []int32 {
	if p, ok := compressScratch.Get().(*[]int32); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]int32, n)
}

func putWords(w []int32) { compressScratch.Put(&w) }

// halves views 32-bit words as the 16-bit values packed in them (two per
// word, in memory order).
func halves(w []int32, n int) []uint16 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&w[0])), 2*len(w))[:n]
}

// The codecs work on whole slices so the per-element conversions inline
// (a call through a func value per element cost several ms per step).
func encodeFP16(dst []uint16, src []float32, scale float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = float32ToFloat16(v * scale)
	}
}

func decodeAddFP16(dst []float32, src []uint16) {
	table := fp16Table()
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] += table[h]
	}
}

// fp16Table maps every half to its float32 value (256 KiB, built once):
// small gradients are mostly fp16 subnormals, whose decoding loops.
var fp16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = float16ToFloat32(uint16(h))
	}
	return &t
})

func encodeBF16(dst []uint16, src []float32, scale float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = float32ToBFloat16(v * scale)
	}
}

func decodeAddBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] += bfloat16ToFloat32(h)
	}
}

func compressedHook(ctx context.Context, g Group, bucket []float32, encode func(dst []uint16, src []float32, scale float32), decodeAdd func(dst []float32, src []uint16)) error {
	n := g.Size()
	scale := 1 / float32(n)
	// Two 16-bit values per int32 word: distributed moves 32- and 64-bit types.
	nw := (len(bucket) + 1) / 2
	words := getWords(nw)
	defer putWords(words)
	encode(halves(words, len(bucket)), bucket, scale)
	if len(bucket)%2 == 1 {
		halves(words, 2*nw)[len(bucket)] = 0
	}
	all := getWords(n * nw)
	defer putWords(all)
	if err := g.AllGather(ctx, all, words); err != nil {
		return err
	}
	clear(bucket)
	for r := 0; r < n; r++ {
		decodeAdd(bucket, halves(all[r*nw:(r+1)*nw], len(bucket)))
	}
	return nil
}

// float32ToFloat16 rounds to the nearest IEEE binary16, ties to even;
// overflow becomes ±Inf, NaN stays NaN.
func float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0:
		if e < -10 {
			return sign
		}
		// Subnormal: shift the mantissa with its implicit bit into place.
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := m & ((1 << shift) - 1)
		out := m >> shift
		if rest > half || (rest == half && out&1 == 1) {
			out++
		}
		return sign | uint16(out)
	}
	out := uint32(e)<<10 | mant>>13
	rest := mant & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && out&1 == 1) {
		out++ // may carry into the exponent, which is correct rounding
	}
	return sign | uint16(out)
}

func float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// float32ToBFloat16 keeps the upper 16 bits, rounding to nearest even.
func float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func bfloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
