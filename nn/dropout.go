package nn

import (
	"fmt"

	"github.com/gotrain/gotrain/tensor"
)

// DropoutLayer zeroes each element with probability P in training mode and
// scales the rest by 1/(1−P), PyTorch's nn.Dropout; in eval mode it is the
// identity. Its masks come from its own generator, seeded at construction
// from the generator SetSeed controls and re-seedable with Seed.
type DropoutLayer struct {
	Base
	P   float64
	rng *tensor.RNG
}

// Dropout returns a dropout layer with drop probability p in [0, 1].
func Dropout(p float64) *DropoutLayer {
	if !(p >= 0 && p <= 1) {
		panic(fmt.Sprintf("nn: Dropout(%v): probability must be in [0, 1]", p))
	}
	d := &DropoutLayer{P: p}
	withInitRNG(func(rng *tensor.RNG) { d.rng = tensor.NewRNG(rng.Uint64()) })
	return d
}

// Seed restarts the layer's mask generator, so that the masks of later
// Forward calls are reproducible.
func (d *DropoutLayer) Seed(seed uint64) { d.rng = tensor.NewRNG(seed) }

// Forward applies dropout in training mode and returns x unchanged in eval
// mode.
func (d *DropoutLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	return tensor.Dropout(x, float32(d.P), d.Training(), d.rng)
}

// String returns "Dropout(p=…, inplace=False)".
func (d *DropoutLayer) String() string {
	return fmt.Sprintf("Dropout(p=%s, inplace=False)", pyFloat(d.P))
}
