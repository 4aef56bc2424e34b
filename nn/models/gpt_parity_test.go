package models

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testfixture"
	"github.com/gotrain/gotrain/nn"
)

// gptFixture is testdata/gpt_small.json, written by gen_gpt_fixture.py.
type gptFixture struct {
	Config struct {
		VocabSize int `json:"vocab_size"`
		BlockSize int `json:"block_size"`
		NLayer    int `json:"n_layer"`
		NHead     int `json:"n_head"`
		NEmbd     int `json:"n_embd"`
	} `json:"config"`
	B, T          int
	IDs           []int                         `json:"ids"`
	Targets       []int                         `json:"targets"`
	Logits        testfixture.Tensor            `json:"logits"`
	Loss          float64                       `json:"loss"`
	Grads         map[string]testfixture.Tensor `json:"grads"`
	StateDictKeys []string                      `json:"state_dict_keys"`
}

// TestGPTMatchesPyTorch loads the weights PyTorch wrote for a
// nanoGPT-equivalent model and compares the logits, the loss with ignored
// targets, and every parameter's gradient (the tied wte/lm_head weight
// accumulating both uses) with PyTorch's float64 results.
func TestGPTMatchesPyTorch(t *testing.T) {
	f := testfixture.Load[gptFixture](t, "gpt_small.json")
	c := f.Config
	m := GPT(GPTConfig{VocabSize: c.VocabSize, BlockSize: c.BlockSize, NLayer: c.NLayer, NHead: c.NHead, NEmbd: c.NEmbd, Bias: true})
	var keys []string
	for _, e := range nn.StateDict(m) {
		keys = append(keys, e.Name)
	}
	if len(keys) != len(f.StateDictKeys) {
		t.Fatalf("state dict keys %v, PyTorch %v", keys, f.StateDictKeys)
	}
	for i := range keys {
		if keys[i] != f.StateDictKeys[i] {
			t.Fatalf("state dict key %d: %q, PyTorch %q", i, keys[i], f.StateDictKeys[i])
		}
	}
	if err := checkpoint.Load("testdata/gpt_small.safetensors", m); err != nil {
		t.Fatal(err)
	}
	logits, loss := m.Loss(f.IDs, f.Targets, f.B, f.T)
	if got := float64(loss.Item()); math.Abs(got-f.Loss) > 1e-5*math.Abs(f.Loss) {
		t.Errorf("loss %.8g, PyTorch %.8g", got, f.Loss)
	}
	near(t, "logits", logits.Data(), f.Logits, 1e-5)
	if err := loss.Backward(); err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.NamedParameters(m) {
		want, ok := f.Grads[p.Name]
		if !ok {
			t.Errorf("PyTorch has no gradient for %s", p.Name)
			continue
		}
		near(t, "grad "+p.Name, p.Tensor.Grad().Data(), want, 1e-4)
	}
}

// near compares got with a float64 reference to rtol relative to the
// reference's largest magnitude (float32 rounding grows with the values
// summed, not with each result).
func near(t *testing.T, what string, got []float32, want testfixture.Tensor, rtol float64) {
	t.Helper()
	if len(got) != len(want.Data) {
		t.Errorf("%s: %d values, PyTorch %d", what, len(got), len(want.Data))
		return
	}
	scale := 0.0
	for _, v := range want.Data {
		scale = max(scale, math.Abs(v))
	}
	bad := 0
	for i, w := range want.Data {
		if g := float64(got[i]); !(math.Abs(g-w) <= rtol*scale) {
			if bad < 3 {
				t.Errorf("%s[%d] = %.8g, PyTorch %.8g", what, i, g, w)
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(got))
	}
}
