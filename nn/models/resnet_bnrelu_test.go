package models

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// TestResNetFusedBNReLUMatchesSeparate checks that the blocks' fused
// BatchNorm, residual addition and ReLU give bit for bit the logits,
// running statistics and gradients of the separate ops, which the blocks
// run when their BatchNorm layers have forward hooks: ResNet-18 and a
// bottleneck network, in training and in eval, on 1 and 3 threads.
func TestResNetFusedBNReLUMatchesSeparate(t *testing.T) {
	cfgs := []ResNetConfig{
		{Block: "basic", Layers: [4]int{2, 1, 1, 1}, NumClasses: 5, Stem: "cifar"},
		{Block: "bottleneck", Layers: [4]int{1, 1, 1, 1}, NumClasses: 5, Stem: "imagenet"},
	}
	type result struct{ logits, state, grads []float32 }
	run := func(cfg ResNetConfig, training, hooked bool, threads int) result {
		defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
		nn.SetSeed(7)
		m := ResNet(cfg)
		if hooked {
			for _, nm := range nn.NamedModules(m) {
				if bn, ok := nm.Module.(*nn.BatchNormLayer); ok {
					nn.RegisterForwardHook(bn, func(nn.Module, *tensor.Tensor, *tensor.Tensor) {})
				}
			}
		}
		nn.SetTrain(m, training)
		x := tensor.Rand(tensor.NewRNG(3), 2, 3, 16, 16)
		y := m.Forward(x)
		logits := slices.Clone(y.Data())
		if err := nn.CrossEntropy(y, []int{1, 4}).Backward(); err != nil {
			t.Fatal(err)
		}
		var r result
		r.logits = logits
		for _, nv := range nn.StateDict(m) {
			r.state = append(r.state, nv.Tensor.Data()...)
		}
		for _, p := range nn.Parameters(m) {
			r.grads = append(r.grads, p.Grad().Data()...)
		}
		return r
	}
	for _, cfg := range cfgs {
		for _, training := range []bool{true, false} {
			for _, threads := range []int{1, 3} {
				name := fmt.Sprintf("%s/training=%v/threads=%d", cfg.Block, training, threads)
				fused, sep := run(cfg, training, false, threads), run(cfg, training, true, threads)
				if !slices.Equal(fused.logits, sep.logits) {
					t.Errorf("%s: logits differ", name)
				}
				if !slices.Equal(fused.state, sep.state) {
					t.Errorf("%s: state dicts differ after the step", name)
				}
				if !slices.Equal(fused.grads, sep.grads) {
					t.Errorf("%s: gradients differ", name)
				}
			}
		}
	}
}
