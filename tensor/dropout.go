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
	out := Zeros(x.shape...)
	mask := make([]float32, len(x.data))
	if p < 1 {
		dropoutMask(mask, 1/(1-p), bernoulliThreshold(1-p), rng)
		kernels.MulTo(out.data, x.data, mask)
	}
	return record(out, "dropout", func(g []float32) {
		if gx, fresh := x.gradDst(); fresh {
			kernels.MulTo(gx, g, mask)
		} else {
			kernels.AddMulTo(gx, g, mask)
		}
	}, x)
}

// dropoutMask sets mask[i] to scale where a 32-bit uniform draw is below
// keep and to 0 elsewhere, two draws per 64-bit PCG output. It selects with
// bit masks instead of branches: keep-or-drop is a coin toss the branch
// predictor loses.
func dropoutMask(mask []float32, scale float32, keep uint64, rng *RNG) {
	bits := uint64(math.Float32bits(scale))
	// sel(u) is all ones when u < keep (u, keep ≤ 2³², so u−keep borrows).
	sel := func(u uint64) float32 {
		return math.Float32frombits(uint32(-((u - keep) >> 63) & bits))
	}
	i := 0
	for ; i+1 < len(mask); i += 2 {
		u := rng.Uint64()
		mask[i] = sel(u & 0xffffffff)
		mask[i+1] = sel(u >> 32)
	}
	if i < len(mask) {
		mask[i] = sel(rng.Uint64() & 0xffffffff)
	}
}
