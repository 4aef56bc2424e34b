package models

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

var update = flag.Bool("update", false, "rewrite testdata/gotrain_gpt.* (then run testdata/check_gpt_in_torch.py)")

// gotrainGPT is the model of testdata/gotrain_gpt.safetensors: the
// fixture's architecture with weights drawn by gotrain.
func gotrainGPT() (*GPTModel, []int) {
	m := GPT(GPTConfig{VocabSize: 37, BlockSize: 16, NLayer: 2, NHead: 2, NEmbd: 16, Bias: true})
	rng := tensor.NewRNG(77)
	for _, p := range nn.NamedParameters(m) {
		rng.FillNormal(p.Tensor, 0, 0.2) // every parameter non-trivial
	}
	ids := make([]int, 2*9)
	for i := range ids {
		ids[i] = rng.Intn(37)
	}
	return m, ids
}

type gotrainGPTLogits struct {
	B, T   int
	IDs    []int     `json:"ids"`
	Logits []float64 `json:"logits"`
}

// TestGPTCheckpointForPyTorch checks that the safetensors checkpoint
// gotrain writes for a GPT is byte for byte the committed one, which
// testdata/check_gpt_in_torch.py loads into the PyTorch model with
// load_state_dict(strict=True) and whose logits it compares with the
// committed gotrain logits; and that it loads back into a fresh model.
func TestGPTCheckpointForPyTorch(t *testing.T) {
	m, ids := gotrainGPT()
	const B, T = 2, 9
	logits := m.Logits(ids, B, T)
	var buf bytes.Buffer
	if err := checkpoint.WriteModel(&buf, m); err != nil {
		t.Fatal(err)
	}
	const modelPath, logitsPath = "testdata/gotrain_gpt.safetensors", "testdata/gotrain_gpt_logits.json"
	if *update {
		f := gotrainGPTLogits{B: B, T: T, IDs: ids}
		for _, v := range logits.Data() {
			f.Logits = append(f.Logits, float64(v))
		}
		js, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(logitsPath, js, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(modelPath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and %s; run /usr/bin/python3 testdata/check_gpt_in_torch.py", modelPath, logitsPath)
		return
	}
	want, err := os.ReadFile(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("the checkpoint written differs from %s (run with -update if the format changed on purpose)", modelPath)
	}
	f := testfixtureLoad[gotrainGPTLogits](t, logitsPath)
	for i, v := range logits.Data() {
		if d := float64(v) - f.Logits[i]; d > 1e-5 || d < -1e-5 {
			t.Fatalf("logit %d = %v, committed %v", i, v, f.Logits[i])
		}
	}
	// Back into gotrain: a fresh model loads the file and agrees exactly.
	m2 := GPT(m.Config)
	if err := checkpoint.Load(modelPath, m2); err != nil {
		t.Fatal(err)
	}
	if m2.LMHead.Weight != m2.WTE.Weight {
		t.Fatal("loading untied lm_head from wte")
	}
	for i, v := range m2.Logits(ids, B, T).Data() {
		if v != logits.Data()[i] {
			t.Fatalf("reloaded logit %d = %v, want %v", i, v, logits.Data()[i])
		}
	}
}

func testfixtureLoad[T any](t *testing.T, path string) *T {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}
