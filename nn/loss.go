package nn

import (
	"fmt"

	"github.com/gotrain/gotrain/tensor"
)

// Reduction says how a loss combines its per-sample values.
type Reduction int

const (
	// ReduceMean averages over samples (PyTorch's default, "mean").
	ReduceMean Reduction = iota
	// ReduceSum adds the samples' losses ("sum").
	ReduceSum
)

// String returns PyTorch's name for the reduction.
func (r Reduction) String() string {
	switch r {
	case ReduceMean:
		return "mean"
	case ReduceSum:
		return "sum"
	}
	panic(fmt.Sprintf("nn: unknown Reduction %d", int(r)))
}

// CrossEntropy returns the mean cross-entropy between logits [N, classes]
// and class indices target (len N): PyTorch's F.cross_entropy, i.e.
// NLL(LogSoftmax(logits, 1), target).
func CrossEntropy(logits *tensor.Tensor, target []int) *tensor.Tensor {
	return CrossEntropyWith(logits, target, ReduceMean)
}

// CrossEntropyWith is CrossEntropy with the given reduction.
func CrossEntropyWith(logits *tensor.Tensor, target []int, r Reduction) *tensor.Tensor {
	return tensor.CrossEntropy(logits, target, r.String())
}

// NLL returns the mean negative log-likelihood of log-probabilities
// [N, classes] at the class indices target, PyTorch's F.nll_loss.
func NLL(logProbs *tensor.Tensor, target []int) *tensor.Tensor {
	return NLLWith(logProbs, target, ReduceMean)
}

// NLLWith is NLL with the given reduction.
func NLLWith(logProbs *tensor.Tensor, target []int, r Reduction) *tensor.Tensor {
	return tensor.NLLLoss(logProbs, target, r.String())
}

// MSE returns the mean squared error between a and b (same shape),
// PyTorch's F.mse_loss.
func MSE(a, b *tensor.Tensor) *tensor.Tensor { return MSEWith(a, b, ReduceMean) }

// MSEWith is MSE with the given reduction.
func MSEWith(a, b *tensor.Tensor, r Reduction) *tensor.Tensor {
	return tensor.MSELoss(a, b, r.String())
}
