package nn

import "github.com/gotrain/gotrain/tensor"

// CallCheckpointed is Call with activation checkpointing (PyTorch's
// checkpoint_wrapper, torch.utils.checkpoint): m's Forward runs between
// m's hooks as in Call, but what its backward needs is not kept; the
// backward pass runs m.Forward again on the same input and differentiates
// that. A model trades one more forward pass of m for the memory of m's
// activations, which then exist for one checkpointed module at a time.
//
// The recomputation replays the masks of m's dropout layers (their
// generators are cloned before the forward pass), so the losses and
// gradients are bitwise those of Call. The hooks run once, around the
// first pass, and see the checkpointed output: a wrapper that gathers m's
// parameters for its backward (fsdp's FullShard) hooks that output, and
// the recomputation runs with them gathered. m must compute the same
// thing both times: the recomputation leaves BatchNorm's running
// statistics as the first run updated them, and m may change no other
// state in Forward. Without autograd recording it is Call.
func CallCheckpointed(m Module, x *tensor.Tensor) *tensor.Tensor {
	if !tensor.GradEnabled() {
		return Call(m, x)
	}
	h := m.base().hooks
	if h != nil {
		for _, e := range append([]preEntry(nil), h.pre...) {
			e.fn(m, x)
		}
	}
	y := checkpointForward(m, x)
	if h != nil {
		for _, e := range append([]postEntry(nil), h.post...) {
			e.fn(m, x, y)
		}
	}
	return y
}

// checkpointForward runs m.Forward through tensor.Checkpoint, replaying
// the generators of m's dropout layers in the recomputation.
func checkpointForward(m Module, x *tensor.Tensor) *tensor.Tensor {
	var drops []*DropoutLayer
	var saved []*tensor.RNG
	var stats []*tensor.Tensor // BatchNorm's running statistics, updated by Forward in training
	for _, nm := range NamedModules(m) {
		if d, ok := nm.Module.(*DropoutLayer); ok && d.rng != nil && d.Training() && d.P > 0 {
			drops = append(drops, d)
			saved = append(saved, d.rng.Clone())
		}
		if b, ok := nm.Module.(*BatchNormLayer); ok && b.Training() {
			for _, t := range []*tensor.Tensor{b.RunningMean, b.RunningVar, b.NumBatchesTracked} {
				if t != nil {
					stats = append(stats, t)
				}
			}
		}
	}
	first := true
	return tensor.Checkpoint(func(x *tensor.Tensor) *tensor.Tensor {
		if first {
			first = false
			return m.Forward(x)
		}
		// The recomputation leaves the running statistics as the first
		// run left them: a batch counts once.
		kept := make([][]float32, len(stats))
		for i, t := range stats {
			kept[i] = append([]float32(nil), t.Data()...)
		}
		defer func() {
			for i, t := range stats {
				copy(t.Data(), kept[i])
			}
		}()
		if len(drops) == 0 {
			return m.Forward(x)
		}
		// The recomputation draws from copies of the generators as they
		// were before the first run; the layers' own generators go on
		// from where the first run left them.
		live := make([]*tensor.RNG, len(drops))
		for i, d := range drops {
			live[i], d.rng = d.rng, saved[i].Clone()
		}
		defer func() {
			for i, d := range drops {
				d.rng = live[i]
			}
		}()
		return m.Forward(x)
	}, x)
}
