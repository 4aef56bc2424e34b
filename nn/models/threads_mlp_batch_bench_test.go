package models

import (
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// BenchmarkMLPStepThreadsBatch is the MNIST MLP's training step of
// `gotrain train mnist` (SGD with momentum 0.9) under benchThreadSplit at
// the job's default batch of 64 and at larger batches, whose GEMMs give
// each thread more work per fork and join.
func BenchmarkMLPStepThreadsBatch(b *testing.B) {
	for _, batch := range []int{64, 256, 1024} {
		b.Run(map[int]string{64: "b64", 256: "b256", 1024: "b1024"}[batch], func(b *testing.B) {
			m := MLP()
			rng := tensor.NewRNG(1)
			x := tensor.Rand(rng, batch, 1, 28, 28)
			target := make([]int, batch)
			for i := range target {
				target[i] = rng.Intn(10)
			}
			opt := optim.NewSGD(nn.Parameters(m), 0.01, optim.Momentum(0.9))
			benchThreadSplit(b, func() {
				opt.ZeroGrad()
				if err := nn.CrossEntropy(m.Forward(x), target).Backward(); err != nil {
					b.Fatal(err)
				}
				opt.Step()
			})
		})
	}
}
