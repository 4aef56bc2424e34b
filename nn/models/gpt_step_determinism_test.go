package models

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// gptTrainBits trains a small GPT (blocks not a multiple of the attention
// tiles) for three AdamW steps from a fixed initialisation and returns
// the losses' and the final parameters' bits.
func gptTrainBits(t *testing.T) (losses []uint32, params []uint32) {
	t.Helper()
	cfg := GPTConfig{VocabSize: 50, BlockSize: 45, NLayer: 2, NHead: 2, NEmbd: 32, Bias: true}
	m := GPT(cfg)
	m.ResetParameters(tensor.NewRNG(3))
	rng := tensor.NewRNG(4)
	const batch = 3
	ids, targets := make([]int, batch*cfg.BlockSize), make([]int, batch*cfg.BlockSize)
	for i := range ids {
		ids[i], targets[i] = rng.Intn(cfg.VocabSize), rng.Intn(cfg.VocabSize)
	}
	ps := nn.Parameters(m)
	opt := optim.NewAdamW(ps, 1e-2)
	for range 3 {
		opt.ZeroGrad()
		_, loss := m.Loss(ids, targets, batch, cfg.BlockSize)
		losses = append(losses, math.Float32bits(loss.Item()))
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
		opt.Step()
	}
	for _, p := range ps {
		for _, v := range p.Data() {
			params = append(params, math.Float32bits(v))
		}
	}
	return losses, params
}

// TestGPTTrainingBitwiseDeterministic checks that two identical training
// runs give the same losses and parameters bit for bit.
func TestGPTTrainingBitwiseDeterministic(t *testing.T) {
	l1, p1 := gptTrainBits(t)
	l2, p2 := gptTrainBits(t)
	for i := range l1 {
		if l1[i] != l2[i] {
			t.Fatalf("step %d: loss %v then %v", i, math.Float32frombits(l1[i]), math.Float32frombits(l2[i]))
		}
	}
	for i := range p1 {
		if p1[i] != p2[i] {
			t.Fatalf("parameter element %d: %v then %v", i, math.Float32frombits(p1[i]), math.Float32frombits(p2[i]))
		}
	}
}
