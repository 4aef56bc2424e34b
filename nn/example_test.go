package nn_test

import (
	"fmt"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// A Sequential model: build it, run a training step's forward and
// backward, and list the state dict PyTorch's nn.Sequential would have.
func ExampleSequential() {
	nn.SetSeed(1)
	model := nn.Sequential(
		nn.Flatten(),
		nn.Linear(784, 128), nn.ReLU(),
		nn.Linear(128, 10),
	)
	x := tensor.Zeros(4, 1, 28, 28)
	loss := nn.CrossEntropy(model.Forward(x), []int{7, 2, 1, 0})
	if err := loss.Backward(); err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range nn.StateDict(model) {
		fmt.Println(e.Name, e.Tensor.Shape(), e.Tensor.Grad() != nil)
	}
	// Output:
	// 1.weight [128 784] true
	// 1.bias [128] true
	// 3.weight [10 128] true
	// 3.bias [10] true
}

// Net is a user-defined module: fields registered by name give PyTorch's
// "fc1.weight"-style keys.
type Net struct {
	nn.Base
	fc1 *nn.LinearLayer
	bn  *nn.BatchNormLayer
	fc2 *nn.LinearLayer
}

func NewNet() *Net {
	n := &Net{fc1: nn.Linear(20, 16), bn: nn.BatchNorm1d(16), fc2: nn.Linear(16, 3)}
	n.Register("fc1", n.fc1)
	n.Register("bn", n.bn)
	n.Register("fc2", n.fc2)
	return n
}

func (n *Net) Forward(x *tensor.Tensor) *tensor.Tensor {
	return n.fc2.Forward(tensor.ReLU(n.bn.Forward(n.fc1.Forward(x))))
}

func ExampleBase() {
	net := NewNet()
	for _, e := range nn.StateDict(net) {
		fmt.Println(e.Name, e.Tensor.Shape(), e.Dtype)
	}
	// Output:
	// fc1.weight [16 20] float32
	// fc1.bias [16] float32
	// bn.weight [16] float32
	// bn.bias [16] float32
	// bn.running_mean [16] float32
	// bn.running_var [16] float32
	// bn.num_batches_tracked [] int64
	// fc2.weight [3 16] float32
	// fc2.bias [3] float32
}

func ExampleLoadStateDict() {
	model := nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
	sd := map[string]*tensor.Tensor{
		"0.weight": tensor.Zeros(3, 4),
		"0.bias":   tensor.Zeros(3),
		"2.weight": tensor.Zeros(2, 5),
		"2.extra":  tensor.Zeros(1),
	}
	err := nn.LoadStateDict(model, sd, true)
	fmt.Println(err)
	// Output:
	// nn: load state dict: 1 missing key [2.bias]; 1 unexpected key [2.extra]; 1 shape mismatch: 2.weight: have [2 3], got [2 5]
}

// A transformer's pieces: token and position embeddings, LayerNorm and
// causal self-attention, with PyTorch's state dict names and repr.
func ExampleCausalSelfAttention() {
	nn.SetSeed(0)
	attn := nn.CausalSelfAttention(8, 2, 0)
	wte, ln := nn.Embedding(10, 8), nn.LayerNorm(8)
	x := wte.Lookup([]int{1, 2, 3, 4, 5, 6}, 2, 3) // [B=2, T=3, 8]
	y := attn.Forward(ln.Forward(x))
	fmt.Println(y.Shape(), nn.NumParameters(attn))
	fmt.Println(nn.Repr(nn.ModuleList(wte, ln)))
	// Output:
	// [2 3 8] 288
	// ModuleList(
	//   (0): Embedding(10, 8)
	//   (1): LayerNorm((8,), eps=1e-05, elementwise_affine=True)
	// )
}
