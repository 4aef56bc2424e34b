package models_test

import (
	"fmt"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// A ResNet-18 for 32×32 images (the CIFAR stem): one SGD step in training
// mode, then evaluation. The state dict has torchvision's names.
func ExampleResNet18() {
	nn.SetSeed(0)
	model := models.ResNet18(10, "cifar")
	x := tensor.Rand(tensor.NewRNG(1), 4, 3, 32, 32)
	target := []int{3, 1, 4, 1}
	opt := optim.NewSGD(nn.Parameters(model), 0.1, optim.Momentum(0.9), optim.WeightDecay(5e-4))

	opt.ZeroGrad()
	loss := nn.CrossEntropy(model.Forward(x), target)
	if err := loss.Backward(); err != nil {
		panic(err)
	}
	opt.Step()

	nn.SetTrain(model, false)
	fmt.Println("logits", model.Forward(x).Shape())
	sd := nn.StateDict(model)
	fmt.Println(len(sd), "state dict entries")
	for _, e := range sd[:7] {
		fmt.Println(e.Name, e.Tensor.Shape())
	}
	fmt.Println(sd[len(sd)-2].Name, sd[len(sd)-2].Tensor.Shape())
	// Output:
	// logits [4 10]
	// 122 state dict entries
	// conv1.weight [64 3 3 3]
	// bn1.weight [64]
	// bn1.bias [64]
	// bn1.running_mean [64]
	// bn1.running_var [64]
	// bn1.num_batches_tracked []
	// layer1.0.conv1.weight [64 64 3 3]
	// fc.weight [10 512]
}
