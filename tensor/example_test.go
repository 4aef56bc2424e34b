package tensor_test

import (
	"fmt"

	"github.com/gotrain/gotrain/tensor"
)

// A grad hook runs as soon as a parameter's gradient is final, before
// Backward returns; DDP starts its allreduce there. Parameters used last in
// the forward pass are ready first.
func ExampleTensor_Backward() {
	x := tensor.New([]float32{1, 2, 3, 4}, 2, 2)
	w1 := tensor.New([]float32{0.5, -0.5, 1, 1}, 2, 2).SetRequiresGrad(true)
	w2 := tensor.New([]float32{1, 2}, 1, 2).SetRequiresGrad(true)
	for name, p := range map[string]*tensor.Tensor{"w1": w1, "w2": w2} {
		p.AddGradHook(func(pass *tensor.Pass, p *tensor.Tensor) {
			fmt.Printf("%s ready: %v\n", name, p.Grad().Data())
			pass.OnFinish(func() error { fmt.Println("finish after", name); return nil })
		})
	}
	h := tensor.ReLU(tensor.Linear(x, w1, nil))
	loss := tensor.Sum(tensor.Linear(h, w2, nil), false)
	if err := loss.Backward(); err != nil {
		fmt.Println(err)
	}
	fmt.Println("loss", loss.Item())
	// Output:
	// w2 ready: [0 10]
	// w1 ready: [0 0 8 12]
	// finish after w2
	// finish after w1
	// loss 20
}

// Linear, CrossEntropy and ArgMax are the pieces of a classifier's step.
func ExampleCrossEntropy() {
	rng := tensor.NewRNG(1)
	x := tensor.Randn(rng, 4, 3)
	w := tensor.Zeros(2, 3).SetRequiresGrad(true)
	b := tensor.Zeros(2).SetRequiresGrad(true)
	target := []int{0, 1, 1, 0}
	loss := tensor.CrossEntropy(tensor.Linear(x, w, b), target, "mean")
	if err := loss.Backward(); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("loss %.4f (ln 2), bias grad %v\n", loss.Item(), b.Grad().Data())
	fmt.Println("predictions", tensor.ArgMax(tensor.Linear(x, w, b), 1))
	// Output:
	// loss 0.6931 (ln 2), bias grad [0 0]
	// predictions [0 0 0 0]
}

// Conv2d takes PyTorch layouts: input [N, C, H, W], weight [O, C, KH, KW].
func ExampleConv2d() {
	x := tensor.Full(1, 1, 1, 4, 4)                       // one 4×4 image of ones
	w := tensor.Full(1, 2, 1, 3, 3).SetRequiresGrad(true) // two 3×3 box filters
	b := tensor.New([]float32{0, 100}, 2)
	y := tensor.Conv2d(x, w, b, [2]int{2, 2}, [2]int{1, 1}) // stride 2, padding 1
	fmt.Println(y.Shape(), y.Data())
	if err := tensor.Sum(y, false).Backward(); err != nil {
		fmt.Println(err)
	}
	// Each tap's gradient counts the outputs whose window saw a real pixel.
	fmt.Println(w.Grad().Data()[:9])
	// Output:
	// [1 2 2 2] [4 6 6 9 104 106 106 109]
	// [1 2 2 2 4 4 2 4 4]
}

// Under NoGrad ops record nothing, as for evaluation.
func ExampleNoGrad() {
	w := tensor.New([]float32{2}, 1, 1).SetRequiresGrad(true)
	var y *tensor.Tensor
	tensor.NoGrad(func() { y = tensor.Linear(tensor.Full(3, 1, 1), w, nil) })
	fmt.Println(y.Item(), y.RequiresGrad())
	// Output: 6 false
}

// ScaledDotProductAttention on [B, H, T, Dh] queries, keys and values:
// with the causal mask the first position can attend only to itself, so
// its output is its own value.
func ExampleScaledDotProductAttention() {
	rng := tensor.NewRNG(1)
	q, k := tensor.Randn(rng, 1, 2, 5, 4), tensor.Randn(rng, 1, 2, 5, 4)
	v := tensor.Randn(rng, 1, 2, 5, 4).SetRequiresGrad(true)
	y := tensor.ScaledDotProductAttention(q, k, v, true)
	fmt.Println(y.Shape(), fmt.Sprint(y.Data()[:4]) == fmt.Sprint(v.Data()[:4]))
	if err := tensor.Sum(y, false).Backward(); err != nil {
		fmt.Println(err)
	}
	fmt.Println(v.Grad().Shape())
	// Output:
	// [1 2 5 4] true
	// [1 2 5 4]
}

// SelfAttentionQKV attends over the heads of a fused [B, T, 3·C]
// projection and returns [B, T, C]: the first position's output is its
// own value, the columns 2C..3C of its row.
func ExampleSelfAttentionQKV() {
	rng := tensor.NewRNG(1)
	qkv := tensor.Randn(rng, 1, 5, 3*8).SetRequiresGrad(true) // B=1, T=5, C=8
	y := tensor.SelfAttentionQKV(qkv, 2, true)                // 2 heads of 4
	fmt.Println(y.Shape(), fmt.Sprint(y.Data()[:8]) == fmt.Sprint(qkv.Data()[16:24]))
	if err := tensor.Sum(y, false).Backward(); err != nil {
		fmt.Println(err)
	}
	fmt.Println(qkv.Grad().Shape())
	// Output:
	// [1 5 8] true
	// [1 5 24]
}

// Embedding picks rows of a weight by token id; CrossEntropyIgnore scores
// [B, T, V] logits against per-position targets, skipping ignore_index.
func ExampleEmbedding() {
	w := tensor.New([]float32{0, 0, 1, 1, 2, 2}, 3, 2).SetRequiresGrad(true)
	x := tensor.Embedding(w, []int{2, 0, 2, 1}, 2, 2) // [B=2, T=2, D=2]
	fmt.Println(x.Shape(), x.Data())
	loss := tensor.CrossEntropyIgnore(x, []int{1, -100, 0, 1}, -100, "mean")
	if err := loss.Backward(); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("%.4f\n", w.Grad().Data()) // id 2 is used twice (its two gradients cancel here); id 0 only where the target is ignored
	// Output:
	// [2 2 2] [2 2 0 0 2 2 1 1]
	// [0.0000 0.0000 0.1667 -0.1667 0.0000 0.0000]
}
