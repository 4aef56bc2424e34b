package models_test

import (
	"fmt"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/tensor"
)

func ExampleMNISTNet() {
	nn.SetSeed(0)
	model := models.MNISTNet()
	nn.SetTrain(model, false)
	logits := model.Forward(tensor.Zeros(8, 1, 28, 28))
	fmt.Println("logits", logits.Shape())
	for _, e := range nn.StateDict(model) {
		fmt.Println(e.Name, e.Tensor.Shape())
	}
	// Output:
	// logits [8 10]
	// 0.weight [32 1 3 3]
	// 0.bias [32]
	// 2.weight [64 32 3 3]
	// 2.bias [64]
	// 7.weight [128 9216]
	// 7.bias [128]
	// 10.weight [10 128]
	// 10.bias [10]
}
