// Package models holds ready-made networks with PyTorch-compatible state
// dicts: the models of the PyTorch MNIST examples that gotrain trains and
// benchmarks, and GPT, nanoGPT's transformer language model.
package models

import "github.com/gotrain/gotrain/nn"

// MLP returns the 784-512-512-10 multilayer perceptron for 28×28 images:
//
//	Sequential(Flatten, Linear(784, 512), ReLU, Linear(512, 512), ReLU, Linear(512, 10))
//
// Its state dict keys are "1.weight", "1.bias", "3.weight", "3.bias",
// "5.weight" and "5.bias", as for the same torch.nn.Sequential. It takes
// [N, 1, 28, 28] or [N, 784] inputs and returns [N, 10] logits.
func MLP() *nn.SequentialLayer {
	return nn.Sequential(
		nn.Flatten(),
		nn.Linear(784, 512), nn.ReLU(),
		nn.Linear(512, 512), nn.ReLU(),
		nn.Linear(512, 10),
	)
}

// MNISTNet returns the convolutional network of the pytorch/examples MNIST
// example as a Sequential:
//
//	Conv2d(1, 32, 3), ReLU, Conv2d(32, 64, 3), ReLU, MaxPool2d(2),
//	Dropout(0.25), Flatten, Linear(9216, 128), ReLU, Dropout(0.5), Linear(128, 10)
//
// Its state dict keys are "0.*", "2.*", "7.*" and "10.*" (weight and bias
// each). It takes [N, 1, 28, 28] inputs and returns [N, 10] logits; apply
// CrossEntropy (the example's log_softmax + nll_loss) for the loss.
func MNISTNet() *nn.SequentialLayer {
	return nn.Sequential(
		nn.Conv2d(1, 32, 3), nn.ReLU(),
		nn.Conv2d(32, 64, 3), nn.ReLU(),
		nn.MaxPool2d(2),
		nn.Dropout(0.25),
		nn.Flatten(),
		nn.Linear(9216, 128), nn.ReLU(),
		nn.Dropout(0.5),
		nn.Linear(128, 10),
	)
}
