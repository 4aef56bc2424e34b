package models

import (
	"math"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

func TestGPTNamesAndTying(t *testing.T) {
	cfg := GPTConfig{VocabSize: 11, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 8, Bias: true}
	m := GPT(cfg)
	var keys []string
	for _, e := range nn.StateDict(m) {
		keys = append(keys, e.Name)
	}
	want := []string{"transformer.wte.weight", "transformer.wpe.weight",
		"transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
		"transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias",
		"transformer.h.0.attn.c_proj.weight", "transformer.h.0.attn.c_proj.bias",
		"transformer.h.0.ln_2.weight", "transformer.h.0.ln_2.bias",
		"transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.bias",
		"transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.bias"}
	for i, k := range want {
		if keys[i] != k {
			t.Fatalf("state dict key %d = %q, want %q (all: %v)", i, keys[i], k, keys)
		}
	}
	if last := keys[len(keys)-3:]; last[0] != "transformer.ln_f.weight" || last[1] != "transformer.ln_f.bias" || last[2] != "lm_head.weight" {
		t.Fatalf("last keys %v", last)
	}
	if len(keys) != 2+2*12+2+1 {
		t.Fatalf("%d keys, want %d", len(keys), 2+2*12+2+1)
	}
	named := nn.NamedParameters(m)
	if len(named) != len(keys)-1 {
		t.Fatalf("%d named parameters, want %d (lm_head tied)", len(named), len(keys)-1)
	}
	if m.LMHead.Weight != m.WTE.Weight {
		t.Fatal("lm_head.weight is not transformer.wte.weight")
	}
	c := cfg.NEmbd
	perBlock := 2*c + 3*c*c + 3*c + c*c + c + 2*c + 4*c*c + 4*c + 4*c*c + c
	if n, want := m.NumParams(false), cfg.VocabSize*c+cfg.BlockSize*c+cfg.NLayer*perBlock+2*c; n != want {
		t.Fatalf("NumParams = %d, want %d", n, want)
	}
}

func TestGPTLossAndBadInput(t *testing.T) {
	cfg := GPTConfig{VocabSize: 13, BlockSize: 6, NLayer: 1, NHead: 2, NEmbd: 8, Bias: true}
	m := GPT(cfg)
	ids := []int{1, 2, 3, 4, 5, 6, 7, 8}
	targets := []int{2, 3, 4, IgnoreIndex, 6, 7, 8, 9}
	logits, loss := m.Loss(ids, targets, 2, 4)
	if s := logits.Shape(); s[0] != 2 || s[1] != 4 || s[2] != 13 {
		t.Fatalf("logits %v", s)
	}
	// Freshly initialised weights give near-uniform predictions.
	if l := float64(loss.Item()); math.Abs(l-math.Log(13)) > 0.1 {
		t.Fatalf("initial loss %v, want about ln 13 = %v", l, math.Log(13))
	}
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.NamedParameters(m) {
		if p.Tensor.Grad() == nil {
			t.Fatalf("%s got no gradient", p.Name)
		}
	}
	if err := m.Check(make([]int, 14), 2, 7); err == nil || !strings.Contains(err.Error(), "length 7") || !strings.Contains(err.Error(), "block size 6") {
		t.Fatalf("long sequence: %v", err)
	}
	if err := m.Check([]int{0, 13}, 1, 2); err == nil || !strings.Contains(err.Error(), "id 13") || !strings.Contains(err.Error(), "vocabulary size 13") {
		t.Fatalf("bad id: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "block size 6") {
				t.Fatalf("panic %v", r)
			}
		}()
		m.Logits(make([]int, 7), 1, 7)
	}()
}

// TestGPTStepsReuseBuffers runs three backward passes on the same batch:
// the intermediate results handed back to the buffer pool after each must
// not change the next pass's loss or gradients.
func TestGPTStepsReuseBuffers(t *testing.T) {
	cfg := GPTConfig{VocabSize: 23, BlockSize: 40, NLayer: 2, NHead: 2, NEmbd: 32, Bias: true}
	m := GPT(cfg)
	rng := tensor.NewRNG(3)
	const B, T = 3, 40 // activations large enough for the pool
	ids, targets := make([]int, B*T), make([]int, B*T)
	for i := range ids {
		ids[i], targets[i] = rng.Intn(cfg.VocabSize), rng.Intn(cfg.VocabSize)
	}
	params := nn.Parameters(m)
	var first []float32
	var firstLoss float32
	for step := range 3 {
		for _, p := range params {
			p.ZeroGrad()
		}
		_, loss := m.Loss(ids, targets, B, T)
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
		var g []float32
		for _, p := range params {
			g = append(g, p.Grad().Data()...)
		}
		if step == 0 {
			first, firstLoss = g, loss.Item()
			continue
		}
		if loss.Item() != firstLoss {
			t.Fatalf("step %d: loss %v, first %v", step, loss.Item(), firstLoss)
		}
		for i := range g {
			if g[i] != first[i] {
				t.Fatalf("step %d: gradient %d = %v, first %v", step, i, g[i], first[i])
			}
		}
	}
}

// TestGPTDropout trains with dropout (attention probabilities through the
// unfused path) and checks that eval mode turns it off: the logits then
// equal those of the same weights built without dropout.
func TestGPTDropout(t *testing.T) {
	cfg := GPTConfig{VocabSize: 17, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 8, Dropout: 0.2, Bias: true}
	m := GPT(cfg)
	m.ResetParameters(tensor.NewRNG(4))
	ids := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	targets := []int{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	_, loss := m.Loss(ids, targets, 2, 5)
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.NamedParameters(m) {
		if p.Tensor.Grad() == nil {
			t.Fatalf("%s got no gradient", p.Name)
		}
	}
	nn.SetTrain(m, false)
	plain := cfg
	plain.Dropout = 0
	m0 := GPT(plain)
	m0.ResetParameters(tensor.NewRNG(4))
	a, b := m.Logits(ids, 2, 5).Data(), m0.Logits(ids, 2, 5).Data()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("eval logits[%d] = %v, without dropout %v", i, a[i], b[i])
		}
	}
	nn.SetTrain(m, true)
	c := m.Logits(ids, 2, 5).Data()
	same := true
	for i := range c {
		same = same && c[i] == b[i]
	}
	if same {
		t.Fatal("training-mode logits with dropout 0.2 equal the eval ones")
	}
}

// TestGPTGenerate checks sampling: the prompt is kept, n tokens follow,
// top-1 sampling is greedy (the argmax of the logits), a prompt longer
// than the block is cropped, and bad arguments are errors.
func TestGPTGenerate(t *testing.T) {
	cfg := GPTConfig{VocabSize: 11, BlockSize: 4, NLayer: 1, NHead: 2, NEmbd: 8, Bias: true}
	m := GPT(cfg)
	m.ResetParameters(tensor.NewRNG(6))
	for _, p := range nn.NamedParameters(m) { // far from uniform predictions
		tensor.NewRNG(9).FillNormal(p.Tensor, 0, 1)
	}
	prompt := []int{1, 2, 3, 4, 5, 6}
	out, err := m.Generate(prompt, 5, 1, 1, tensor.NewRNG(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 11 || out[0] != 1 || out[5] != 6 {
		t.Fatalf("generated %v", out)
	}
	for i := 6; i < len(out); i++ {
		ctx := out[max(0, i-cfg.BlockSize):i]
		logits := m.Logits(ctx, 1, len(ctx)).Data()[(len(ctx)-1)*cfg.VocabSize:]
		best := 0
		for j, v := range logits {
			if v > logits[best] {
				best = j
			}
		}
		if out[i] != best {
			t.Fatalf("token %d = %d, greedy choice %d", i, out[i], best)
		}
	}
	if !m.Training() {
		t.Fatal("Generate left the model in eval mode")
	}
	sampled, err := m.Generate(prompt[:1], 20, 1.5, 0, tensor.NewRNG(2))
	if err != nil || len(sampled) != 21 {
		t.Fatalf("sampled %v, %v", sampled, err)
	}
	if _, err := m.Generate(prompt, 1, 0, 0, tensor.NewRNG(1)); err == nil {
		t.Fatal("temperature 0 accepted")
	}
	if _, err := m.Generate([]int{11}, 1, 1, 0, tensor.NewRNG(1)); err == nil || !strings.Contains(err.Error(), "vocabulary size 11") {
		t.Fatalf("bad id: %v", err)
	}
}
