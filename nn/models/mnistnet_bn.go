package models

import "github.com/gotrain/gotrain/nn"

// MNISTNetBN returns MNISTNet with batch normalisation after each
// convolution and after the hidden linear layer, in place of its dropout
// (batch normalisation regularises enough, and without dropout a run
// depends only on its seed and global batch, not on how the batch is
// split between ranks):
//
//	Conv2d(1, 32, 3), BatchNorm2d(32), ReLU, Conv2d(32, 64, 3), BatchNorm2d(64), ReLU,
//	MaxPool2d(2), Flatten, Linear(9216, 128), BatchNorm1d(128), ReLU, Linear(128, 10)
//
// Its state dict keys are those of the same torch.nn.Sequential: "0.*",
// "3.*", "8.*" and "11.*" (weight and bias) and "1.*", "4.*" and "9.*"
// (weight, bias, running_mean, running_var, num_batches_tracked). It takes
// [N, 1, 28, 28] inputs and returns [N, 10] logits. In data-parallel
// training, ddp.ConvertSyncBatchNorm makes its statistics those of the
// global batch.
func MNISTNetBN() *nn.SequentialLayer {
	return nn.Sequential(
		nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32), nn.ReLU(),
		nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(),
		nn.MaxPool2d(2),
		nn.Flatten(),
		nn.Linear(9216, 128), nn.BatchNorm1d(128), nn.ReLU(),
		nn.Linear(128, 10),
	)
}
