package imagejob

import (
	"fmt"

	"github.com/gotrain/gotrain/jobs/jobflag"
)

// The constants of MemoryEstimate's formula. The activations are counted
// from the tensors a ResNet step keeps, then scaled by 1.45 to the peak
// RSS of a run of this job (ResNet-18, 32×32, batch 128, the cache
// nearly empty: 3 039 MiB), which holds the garbage Go's collector has
// not yet reclaimed; ResNet-50 with the ImageNet stem at 96×96, batch 8,
// peaked at 816 MiB where the formula gives 1 061 without the cache.
const (
	// memBase is the runtime and the binary.
	memBase = 176 << 20
	// memStateCopies are the copies of the parameters a rank keeps:
	// weights, gradients, SGD's momentum and DDP's bucket.
	memStateCopies = 4
	// loaderBuffers are the loader's batch buffers (two prefetched and
	// the one trained on).
	loaderBuffers = 3
)

// memModels are each model's parameters (with a 1000-class head, the
// largest usual) and the floats a training step holds per sample per
// pixel of the input with the CIFAR stem: every block's convolution,
// BatchNorm, ReLU and sum outputs (64·S²·2⁻ˢ channels × pixels in stage
// s: 29, 51 and 151 times 64·S² for ResNet-18, 34 and 50), doubled for
// their gradients and the 3×3 convolutions' unfolded inputs, and scaled
// as measured (see above).
var memModels = map[string]struct{ params, perPixel float64 }{
	"resnet18": {11.7e6, 2 * 42 * 64},
	"resnet34": {21.8e6, 2 * 74 * 64},
	"resnet50": {25.6e6, 2 * 219 * 64},
}

// MemoryEstimate is the memory one rank needs at its peak, estimated as
//
//	176 MiB + cache + 4 B × (4·P + B·S²·(A + 9))
//
// with P the model's parameters, B the batch size, S the image size and
// A the floats a step holds per sample per pixel (5 376 for ResNet-18,
// 9 472 for 34, 28 032 for 50; a sixteenth with the ImageNet stem, whose
// first convolution and pooling quarter each side): four copies of the
// parameters, the step's activations, and the loader's three buffers of
// 3 channels. The cache counts at its bound (--cache-mib), which a
// smaller dataset does not fill. It names --batch-size or --image-size,
// whichever weighs more.
func (c Config) MemoryEstimate() jobflag.Memory {
	d := c.withDefaults()
	m, ok := memModels[d.Model]
	if !ok {
		m = memModels["resnet50"] // the largest, for a name CheckFlags refuses
	}
	perPixel := func() float64 {
		if d.Stem == "imagenet" || d.Stem == "" && d.ImageSize > 64 {
			return m.perPixel / 16
		}
		return m.perPixel
	}
	pixels := func() float64 { return float64(d.BatchSize) * float64(d.ImageSize) * float64(d.ImageSize) }
	acts := func() float64 { return pixels() * perPixel() }
	loader := func() float64 { return pixels() * 3 * loaderBuffers }
	cache := float64(*d.CacheMiB) * (1 << 20)
	bytes := func() float64 { return memBase + cache + 4*(memStateCopies*m.params+acts()+loader()) }
	parts := func() string {
		return fmt.Sprintf("parameters ×%d copies %s, activations %s, batch buffers %s, decoded-image cache up to %s",
			memStateCopies, jobflag.Bytes(4*memStateCopies*m.params), jobflag.Bytes(4*acts()), jobflag.Bytes(4*loader()), jobflag.Bytes(cache))
	}
	def := Config{}.withDefaults()
	return jobflag.Estimate(bytes, parts, []jobflag.Size{
		{Flag: "batch-size", Field: &d.BatchSize, Default: def.BatchSize},
		{Flag: "image-size", Field: &d.ImageSize, Default: def.ImageSize},
	})
}
