package optim_test

import (
	"fmt"

	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// Minimise (w − 3)² with SGD and momentum, decaying the learning rate
// every 50 steps.
func Example() {
	w := tensor.Zeros(1).SetRequiresGrad(true)
	w.SetGrad(tensor.Zeros(1))
	opt := optim.NewSGD([]*tensor.Tensor{w}, 0.1, optim.Momentum(0.9))
	sched := optim.NewStepLR(opt, 50, 0.5)
	for step := 0; step < 200; step++ {
		opt.ZeroGrad()
		w.Grad().Data()[0] = 2 * (w.Data()[0] - 3) // d/dw (w − 3)²
		opt.Step()
		sched.Step()
	}
	fmt.Printf("w = %.4f, lr = %g\n", w.Data()[0], sched.LastLR())
	// Output: w = 3.0000, lr = 0.00625
}

// Save an optimizer's state after a step and restore it into a new one, as
// a resumed training run does.
func ExampleOptimizer_stateDict() {
	w := tensor.New([]float32{1, 2}, 2).SetRequiresGrad(true)
	w.SetGrad(tensor.New([]float32{0.5, -0.5}, 2))
	opt := optim.NewAdam([]*tensor.Tensor{w}, 0.01)
	opt.Step()
	st := opt.StateDict()

	fresh := optim.NewAdam([]*tensor.Tensor{w}, 0.01)
	if err := fresh.LoadStateDict(st); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(fresh.StateDict().Meta["state.0.step"], fresh.StateDict().Tensors["state.0.exp_avg"].Data())
	// Output: 1 [0.05 -0.05]
}

// The transformer recipe: weight decay on the matrices only, a linear
// warm-up then cosine decay stepped per batch, and gradient clipping.
func ExampleOptimizer_AddParamGroup() {
	w := tensor.New([]float32{1, 2, 3, 4}, 2, 2).SetRequiresGrad(true) // a weight matrix
	b := tensor.New([]float32{1, 1}, 2).SetRequiresGrad(true)          // a bias
	opt := optim.NewAdamW([]*tensor.Tensor{w}, 1e-3, optim.Betas(0.9, 0.95), optim.WeightDecay(0.1))
	opt.AddParamGroup([]*tensor.Tensor{b}, optim.WeightDecay(0))

	warm := optim.NewLinearLR(opt, 0.1, 1, 10)
	cos := optim.NewCosineAnnealingLR(opt, 90, 1e-4)
	sched := optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{10})
	for step := range 12 {
		w.SetGrad(tensor.New([]float32{3, 0, 0, 4}, 2, 2))
		b.SetGrad(tensor.New([]float32{0, 0}, 2))
		norm := optim.ClipGradNorm([]*tensor.Tensor{w, b}, 1.0)
		opt.Step()
		sched.Step()
		if step == 0 || step == 11 {
			fmt.Printf("step %d: norm %.1f, clipped grad %.3f, next lr %.6f\n", step, norm, w.Grad().Data()[0], sched.LastLR())
		}
	}
	// Output:
	// step 0: norm 5.0, clipped grad 0.600, next lr 0.000190
	// step 11: norm 5.0, clipped grad 0.600, next lr 0.000999
}

// OneCycleLR rises from MaxLR/25 to MaxLR over the first 30% of the steps
// and anneals to MaxLR/25/1e4, stepped once per batch (the rates are
// PyTorch's).
func ExampleNewOneCycleLR() {
	opt := optim.NewSGD([]*tensor.Tensor{tensor.Zeros(1)}, 0.1)
	sched := optim.NewOneCycleLR(opt, optim.OneCycle{MaxLR: 0.1, TotalSteps: 10})
	for step := range 10 {
		if step%3 == 0 {
			fmt.Printf("step %d: lr %.5f\n", step, opt.LR())
		}
		sched.Step()
	}
	// Output:
	// step 0: lr 0.00400
	// step 3: lr 0.09505
	// step 6: lr 0.03887
	// step 9: lr 0.00000
}
