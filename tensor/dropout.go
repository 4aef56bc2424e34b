package tensor

import "fmt"

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
		scale := 1 / (1 - p)
		keep := bernoulliThreshold(1 - p)
		// Two 32-bit uniform draws per 64-bit PCG output.
		i := 0
		for ; i+1 < len(mask); i += 2 {
			u := rng.Uint64()
			if u&0xffffffff < keep {
				mask[i] = scale
			}
			if u>>32 < keep {
				mask[i+1] = scale
			}
		}
		if i < len(mask) && rng.Uint64()&0xffffffff < keep {
			mask[i] = scale
		}
		for j, xv := range x.data {
			out.data[j] = xv * mask[j]
		}
	}
	return record(out, "dropout", func(g []float32) {
		gx := x.accGrad()
		for j, gv := range g {
			gx[j] += gv * mask[j]
		}
	}, x)
}
