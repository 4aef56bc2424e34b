package tensor

import "math/rand/v2"

// Clone returns a generator in r's state: it draws the numbers r would
// draw next, independently of r. Activation checkpointing replays a
// dropout layer's masks from a clone taken before the forward pass.
func (r *RNG) Clone() *RNG {
	state, err := r.pcg.MarshalBinary()
	if err != nil {
		panic("tensor: RNG.Clone: " + err.Error()) // PCG's state always marshals
	}
	pcg := new(rand.PCG)
	if err := pcg.UnmarshalBinary(state); err != nil {
		panic("tensor: RNG.Clone: " + err.Error())
	}
	return &RNG{r: rand.New(pcg), pcg: pcg}
}
