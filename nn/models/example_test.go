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

// A nanoGPT-style model: logits and the loss against next-token targets,
// nanoGPT's parameter names, the lm_head weight tied to the token
// embedding.
func ExampleGPT() {
	nn.SetSeed(0)
	cfg := models.GPTConfig{VocabSize: 50, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 16, Bias: true}
	m := models.GPT(cfg)
	ids := []int{1, 2, 3, 4, 5, 6, 7, 8}                      // B = 2 sequences of T = 4
	targets := []int{2, 3, 4, 5, 6, 7, 8, models.IgnoreIndex} // next tokens
	logits, loss := m.Loss(ids, targets, 2, 4)
	if err := loss.Backward(); err != nil {
		fmt.Println(err)
	}
	fmt.Println("logits", logits.Shape())
	fmt.Printf("loss ≈ ln 50: %v\n", loss.Item() > 3.8 && loss.Item() < 4.0)
	fmt.Println("parameters", m.NumParams(false), "tied", m.LMHead.Weight == m.WTE.Weight)
	sd := nn.StateDict(m)
	fmt.Println(sd[0].Name, sd[4].Name, sd[len(sd)-1].Name)
	fmt.Println(m.Check(make([]int, 9), 1, 9))
	// Output:
	// logits [2 4 50]
	// loss ≈ ln 50: true
	// parameters 7520 tied true
	// transformer.wte.weight transformer.h.0.attn.c_attn.weight lm_head.weight
	// models: GPT: sequence length 9 is longer than the block size 8
}
