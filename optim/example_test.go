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
