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
	_ = tensor.Zeros
}
