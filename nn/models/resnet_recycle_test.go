package models

import (
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// TestResNetStepReusesPool checks that a training step in its steady
// state takes every large buffer from package tensor's pool: the blocks'
// outputs, the projection shortcuts' results and every other
// intermediate go back to the pool once Backward is done with them, so
// the next step allocates nothing fresh. One thread, so that the buffers
// in use at once are the same every step.
func TestResNetStepReusesPool(t *testing.T) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	tensor.ReleasePool()
	for _, cfg := range []ResNetConfig{
		{Block: "basic", Layers: [4]int{2, 2, 2, 2}, NumClasses: 10, Stem: "cifar"},
		{Block: "bottleneck", Layers: [4]int{1, 2, 1, 1}, NumClasses: 10, Stem: "imagenet"},
	} {
		t.Run(cfg.Block, func(t *testing.T) {
			nn.SetSeed(3)
			m := ResNet(cfg)
			rng := tensor.NewRNG(2)
			x := tensor.Randn(rng, 4, 3, 32, 32)
			target := []int{1, 7, 3, 0}
			opt := optim.NewSGD(nn.Parameters(m), 0.01, optim.Momentum(0.9))
			step := func() {
				opt.ZeroGrad()
				if err := nn.CrossEntropy(m.Forward(x), target).Backward(); err != nil {
					t.Fatal(err)
				}
				opt.Step()
			}
			step()
			step()
			_, before := tensor.PoolStats()
			step()
			if _, after := tensor.PoolStats(); after != before {
				t.Errorf("a steady-state step allocated %d fresh bytes for pooled buffers, want 0", after-before)
			}
		})
	}
}

// TestResNetHooksKeepBlockOutputs checks that the block outputs and
// projection results a forward hook sees (on a block, on the first
// convolution of the next block, on a downsample Sequential or its
// convolution) are left alone by the recycling: after Backward they
// still hold the values the hook saw; and that the step's results are
// the same bits with and without those hooks.
func TestResNetHooksKeepBlockOutputs(t *testing.T) {
	type result struct{ logits, grads []float32 }
	run := func(hooked bool) result {
		nn.SetSeed(11)
		m := ResNet(ResNetConfig{Block: "basic", Layers: [4]int{2, 1, 1, 2}, NumClasses: 5, Stem: "cifar"})
		var seen hookSnapshots
		if hooked {
			b10 := m.stages[1][0].(*BasicBlock)
			b20 := m.stages[2][0].(*BasicBlock)
			b31 := m.stages[3][1].(*BasicBlock)
			for _, mod := range []nn.Module{
				m.stages[0][0],      // its output: the next block's input
				b10.downsample.seq,  // sees layer1's output
				b20.downsample.conv, // sees layer2's output
				b31.conv1,           // sees layer4.0's output
				m.stages[3][1],      // the last block: its output goes to the pooling
				b10.downsample.bn,   // the projection's BatchNorm and its result
			} {
				defer nn.RegisterForwardHook(mod, seen.save)()
			}
		}
		x := tensor.Rand(tensor.NewRNG(4), 3, 3, 16, 16)
		y := m.Forward(x)
		r := result{logits: slices.Clone(y.Data())}
		if err := nn.CrossEntropy(y, []int{1, 2, 4}).Backward(); err != nil {
			t.Fatal(err)
		}
		for _, p := range nn.Parameters(m) {
			r.grads = append(r.grads, p.Grad().Data()...)
		}
		if hooked {
			seen.check(t, 6)
		}
		return r
	}
	plain, hooked := run(false), run(true)
	for _, c := range []struct {
		what string
		a, b []float32
	}{{"logits", plain.logits, hooked.logits}, {"gradients", plain.grads, hooked.grads}} {
		if !slices.Equal(c.a, c.b) {
			t.Errorf("%s differ with hooks", c.what)
		}
	}
}
