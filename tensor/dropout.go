package tensor

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
)

// Dropout zeroes each element of x with probability p while training and
// scales the survivors by 1/(1−p) (inverted dropout), drawing the mask from
// rng. In eval, or with p = 0, it returns x unchanged.
func Dropout(x *Tensor, p float32, training bool, rng *RNG) *Tensor {
	if p < 0 || p > 1 {
		panic(fmt.Sprintf("tensor: Dropout: probability %v outside [0, 1]", p))
	}
	if !training || p == 0 {
		return x
	}
	// Every element of out is written, so it needs no clearing.
	out := &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	track := GradEnabled() && (x.requiresGrad || x.released)
	scale, keep := 1/(1-p), 1-p
	if p < 1 && maskBits(keep) == 16 {
		// A bit mask: the common rates (0.25, 0.5) need no float mask
		// written and read back.
		bits := make([]byte, kernels.DropoutMaskLen(len(x.data)))
		dropoutMaskMul16(out.data, x.data, bits, keep, scale, rng)
		if !track {
			return out
		}
		return record(out, "dropout", func(g []float32) {
			if gx, fresh := x.gradDst(); fresh {
				kernels.DropoutBackward16(gx, g, bits, scale)
			} else {
				// Accumulate as the float mask does, with the same
				// rounding.
				mask := getBuf(len(g))
				for i := range mask {
					mask[i] = kernels.DropoutMaskValue(bits, i, scale)
				}
				kernels.AddMulTo(gx, g, mask)
				putBuf(mask)
			}
			bits = nil
		}, x)
	}
	// Only backward reads the mask, once: it hands the buffer back for
	// reuse when done (or at once if nothing is recorded).
	mask := getBuf(len(x.data))
	if p < 1 {
		// Chunk by chunk, so that MulTo reads the mask back from L1
		// rather than from memory. Chunks are whole 64-bit draws (a
		// multiple of 4 elements), so the stream is the one a single
		// dropoutMask call draws.
		for lo := 0; lo < len(mask); lo += dropoutChunk {
			hi := min(lo+dropoutChunk, len(mask))
			dropoutMask(mask[lo:hi], scale, keep, rng)
			kernels.MulTo(out.data[lo:hi], x.data[lo:hi], mask[lo:hi])
		}
	} else {
		// p = 1: the mask is zero, and so is out.
		clear(mask)
		clear(out.data)
	}
	if !track {
		putBuf(mask)
		return out
	}
	return record(out, "dropout", func(g []float32) {
		if gx, fresh := x.gradDst(); fresh {
			kernels.MulTo(gx, g, mask)
		} else {
			kernels.AddMulTo(gx, g, mask)
		}
		putBuf(mask)
		mask = nil
	}, x)
}

// dropoutChunk is the number of elements Dropout masks and multiplies at
// a time: 16 KiB of mask, which stays in L1 between the two.
const dropoutChunk = 4096

// dropoutMaskMul16 is dropoutMask for 16-bit draws followed by MulTo
// (out = x·mask), with the mask kept as bits: the same draws, kept
// elements and products. The loop here only draws the PCG words;
// kernels.DropoutMask16 compares their 16-bit lanes with the threshold a
// vector at a time and multiplies in the same pass.
func dropoutMaskMul16(out, x []float32, bits []byte, keep, scale float32, rng *RNG) {
	th := uint32(bernoulliThreshold(keep, 16))
	pcg := rng.pcg
	var words [dropoutChunk / 4]uint64
	for lo := 0; lo < len(x); lo += dropoutChunk {
		hi := min(lo+dropoutChunk, len(x))
		w := words[:(hi-lo+3)/4]
		for i := range w {
			w[i] = pcg.Uint64()
		}
		// dropoutChunk is a multiple of 16: each chunk's bits start on a
		// whole byte.
		kernels.DropoutMask16(out[lo:hi], x[lo:hi], bits[lo/8:], w, th, scale)
	}
}

// dropoutMask sets mask[i] to scale with probability keep and to 0
// otherwise, comparing a 16- or 32-bit slice of a 64-bit PCG output with a
// threshold (see maskBits). It selects with bit masks instead of branches:
// keep-or-drop is a coin toss the branch predictor loses.
func dropoutMask(mask []float32, scale, keep float32, rng *RNG) {
	bits := maskBits(keep)
	th := bernoulliThreshold(keep, bits)
	sb := uint64(math.Float32bits(scale))
	// sel(u) is scale when u < th (u, th ≤ 2³², so u−th borrows), else 0.
	sel := func(u uint64) float32 {
		return math.Float32frombits(uint32(-((u - th) >> 63) & sb))
	}
	pcg := rng.pcg
	i := 0
	if bits == 16 {
		for ; i+3 < len(mask); i += 4 {
			u := pcg.Uint64()
			m := mask[i : i+4 : i+4]
			m[0] = sel(u & 0xffff)
			m[1] = sel(u >> 16 & 0xffff)
			m[2] = sel(u >> 32 & 0xffff)
			m[3] = sel(u >> 48)
		}
	} else {
		for ; i+1 < len(mask); i += 2 {
			u := pcg.Uint64()
			m := mask[i : i+2 : i+2]
			m[0] = sel(u & 0xffffffff)
			m[1] = sel(u >> 32)
		}
	}
	if i < len(mask) {
		u := pcg.Uint64()
		for ; i < len(mask); i++ {
			mask[i] = sel(u & (1<<bits - 1))
			u >>= bits
		}
	}
}
