package models

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// hfFixture is testdata/hf_gpt2_logits.json, written by
// testdata/gen_hf_gpt2_fixture.py with the model in testdata/hf_gpt2.
type hfFixture struct {
	IDs    []int     `json:"ids"`
	Logits []float32 `json:"logits"`
	Prompt []int     `json:"prompt"`
	Greedy []int     `json:"greedy"`
}

func readHFFixture(t *testing.T) hfFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "hf_gpt2_logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f hfFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// hfFixtureConfig is the fixture model's config.json.
var hfFixtureConfig = GPTConfig{VocabSize: 256, BlockSize: 64, NLayer: 2, NHead: 2, NEmbd: 64, Bias: true}

// rewriteHF writes the fixture's tensors to dir/model.safetensors with
// their names changed by rename (a tensor renamed "" is dropped), plus
// extra entries, and copies config.json when withConfig.
func rewriteHF(t *testing.T, dir string, rename func(string) string, extra []checkpoint.Entry, withConfig bool) string {
	t.Helper()
	entries, _, err := checkpoint.ReadTensorsFile(filepath.Join("testdata", "hf_gpt2", "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var out []checkpoint.Entry
	for _, e := range entries {
		if e.Name = rename(e.Name); e.Name != "" {
			out = append(out, checkpoint.Entry{Name: e.Name, Tensor: e.Tensor})
		}
	}
	out = append(out, extra...)
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteTensors(f, out, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if withConfig {
		b, err := os.ReadFile(filepath.Join("testdata", "hf_gpt2", "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "model.safetensors")
}

// checkLogits compares logits with want within float32 rounding of the
// two implementations (the fixture keeps 6 decimals).
func checkLogits(t *testing.T, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		d := math.Abs(float64(got[i] - want[i]))
		if d > 2e-4+1e-4*math.Abs(float64(want[i])) {
			t.Fatalf("logit %d = %v, want %v (PyTorch)", i, got[i], want[i])
		}
		worst = max(worst, d)
	}
	t.Logf("largest difference from PyTorch: %.2g", worst)
}

func TestHFGPT2LogitsMatchPyTorch(t *testing.T) {
	fx := readHFFixture(t)
	noPrefix := func(t *testing.T) string {
		// As the Hub's gpt2 model.safetensors: no "transformer.", the mask
		// buffers saved, and lm_head.weight a copy of wte.weight.
		var extra []checkpoint.Entry
		for i := range 2 {
			mask := tensor.Zeros(1, 1, 64, 64)
			extra = append(extra, checkpoint.Entry{Name: fmt.Sprintf("h.%d.attn.bias", i), Tensor: mask},
				checkpoint.Entry{Name: fmt.Sprintf("h.%d.attn.masked_bias", i), Tensor: tensor.New([]float32{-1e4})})
		}
		entries, _, err := checkpoint.ReadTensorsFile(filepath.Join("testdata", "hf_gpt2", "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name == "transformer.wte.weight" {
				extra = append(extra, checkpoint.Entry{Name: "lm_head.weight", Tensor: e.Tensor.Clone()})
			}
		}
		return rewriteHF(t, t.TempDir(), func(n string) string { return strings.TrimPrefix(n, "transformer.") }, extra, true)
	}
	for _, tc := range []struct {
		name string
		path func(t *testing.T) string
	}{
		{"transformer-prefix-dir", func(*testing.T) string { return filepath.Join("testdata", "hf_gpt2") }},
		{"no-prefix-with-buffers", noPrefix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, cfg, err := LoadHFGPT2(tc.path(t))
			if err != nil {
				t.Fatal(err)
			}
			if cfg != hfFixtureConfig {
				t.Fatalf("config %+v, want %+v", cfg, hfFixtureConfig)
			}
			if !m.Blocks[0].MLP.GELU.Tanh || m.LNF.Eps != 1e-5 {
				t.Fatalf("GELU tanh %v, epsilon %v: want gelu_new's tanh form and 1e-5", m.Blocks[0].MLP.GELU.Tanh, m.LNF.Eps)
			}
			nn.SetTrain(m, false)
			var logits []float32
			tensor.NoGrad(func() { logits = m.Logits(fx.IDs, 1, len(fx.IDs)).Data() })
			checkLogits(t, logits, fx.Logits)

			// LoadGPTWeights tells the naming apart and loads the same model.
			m2, cfg2, hf, err := LoadGPTWeights(tc.path(t), 0)
			if err != nil || !hf || cfg2 != cfg {
				t.Fatalf("LoadGPTWeights: hf %v, config %+v, error %v", hf, cfg2, err)
			}
			for i, p := range nn.Parameters(m2) {
				if !sameValues(p.Data(), nn.Parameters(m)[i].Data()) {
					t.Fatalf("LoadGPTWeights: parameter %d differs from LoadHFGPT2's", i)
				}
			}
		})
	}
}

func TestHFGPT2WithoutConfigInfersShapes(t *testing.T) {
	path := rewriteHF(t, t.TempDir(), func(n string) string { return n }, nil, false)
	_, cfg, err := LoadHFGPT2(path)
	if err != nil {
		t.Fatal(err)
	}
	want := hfFixtureConfig
	want.NHead = 1 // n_embd/64
	if cfg != want {
		t.Fatalf("inferred config %+v, want %+v", cfg, want)
	}
}

func TestHFGPT2RejectsOtherModels(t *testing.T) {
	dir := t.TempDir()
	mlp := filepath.Join(dir, "mlp.safetensors")
	if err := checkpoint.Save(mlp, MLP()); err != nil {
		t.Fatal(err)
	}
	threeLayers := t.TempDir()
	rewriteHF(t, threeLayers, func(n string) string { return n }, nil, false)
	cfgJSON, err := os.ReadFile(filepath.Join("testdata", "hf_gpt2", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(threeLayers, "config.json"), []byte(strings.Replace(string(cfgJSON), `"n_layer": 2`, `"n_layer": 3`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	extraKey := t.TempDir()
	rewriteHF(t, extraKey, func(n string) string {
		if n == "transformer.ln_f.bias" {
			return "transformer.ln_f.shift"
		}
		return n
	}, nil, true)
	badAct := t.TempDir()
	rewriteHF(t, badAct, func(n string) string { return n }, nil, false)
	if err := os.WriteFile(filepath.Join(badAct, "config.json"), []byte(strings.Replace(string(cfgJSON), `"gelu_new"`, `"relu"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       []string
	}{
		{"missing-file", filepath.Join(dir, "none.safetensors"), []string{"none.safetensors", "no such file"}},
		{"mlp", mlp, []string{"mlp.safetensors", "not a GPT-2 checkpoint", "1.weight"}},
		{"config-has-more-layers", threeLayers, []string{"n_layer=3", "missing: h.2.attn.c_attn.bias"}},
		{"renamed-key", extraKey, []string{"1 missing: ln_f.bias", "1 unexpected: ln_f.shift"}},
		{"activation", badAct, []string{`activation_function "relu"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := LoadHFGPT2(tc.path)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q is not one line", err)
			}
		})
	}
}

// TestHFGPT2Config124M checks that the published GPT-2 (124M) config and
// the shapes of its model.safetensors (transcribed here: no download) are
// accepted and build models.GPT of GPT-2's 124,439,808 parameters.
func TestHFGPT2Config124M(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 124M-parameter model")
	}
	dir := t.TempDir()
	config := `{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
  "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
  "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null,
  "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index",
  "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257}`
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, eps, tanh, err := ReadHFGPT2Config(path)
	if err != nil {
		t.Fatal(err)
	}
	want := GPTConfig{VocabSize: 50257, BlockSize: 1024, NLayer: 12, NHead: 12, NEmbd: 768, Bias: true}
	if cfg != want || eps != 1e-5 || !tanh {
		t.Fatalf("config %+v eps %v tanh %v, want %+v 1e-5 true", cfg, eps, tanh, want)
	}
	shapes := map[string][]int{"wte.weight": {50257, 768}, "wpe.weight": {1024, 768}, "ln_f.weight": {768}, "ln_f.bias": {768}}
	for i := range 12 {
		p := fmt.Sprintf("h.%d.", i)
		for k, s := range map[string][]int{
			"ln_1.weight": {768}, "ln_1.bias": {768}, "attn.bias": {1, 1, 1024, 1024},
			"attn.c_attn.weight": {768, 2304}, "attn.c_attn.bias": {2304},
			"attn.c_proj.weight": {768, 768}, "attn.c_proj.bias": {768},
			"ln_2.weight": {768}, "ln_2.bias": {768},
			"mlp.c_fc.weight": {768, 3072}, "mlp.c_fc.bias": {3072},
			"mlp.c_proj.weight": {3072, 768}, "mlp.c_proj.bias": {768},
		} {
			if !isHFMaskBuffer(p + k) {
				shapes[p+k] = s
			}
		}
	}
	if err := checkHFGPT2Shapes("gpt2", cfg, shapes); err != nil {
		t.Fatal(err)
	}
	inferred, err := inferHFGPT2Config("gpt2", shapes)
	if err != nil || inferred != want {
		t.Fatalf("inferred %+v (%v), want %+v", inferred, err, want)
	}
	m := GPT(cfg)
	if n := m.NumParams(false); n != 124_439_808 {
		t.Fatalf("%d parameters, want GPT-2's 124439808", n)
	}
	checkGPTShapes(t, m)
}

// checkGPTShapes compares GPTShapes with the state dict of the built model.
func checkGPTShapes(t *testing.T, m *GPTModel) {
	t.Helper()
	want := GPTShapes(m.Config)
	sd := nn.StateDict(m)
	if len(sd) != len(want) {
		t.Fatalf("state dict has %d entries, GPTShapes %d", len(sd), len(want))
	}
	for _, e := range sd {
		if fmt.Sprint(e.Tensor.Shape()) != fmt.Sprint(want[e.Name]) {
			t.Fatalf("%s: state dict %v, GPTShapes %v", e.Name, e.Tensor.Shape(), want[e.Name])
		}
	}
}

func TestGPTShapesMatchStateDict(t *testing.T) {
	for _, bias := range []bool{true, false} {
		checkGPTShapes(t, GPT(GPTConfig{VocabSize: 11, BlockSize: 5, NLayer: 2, NHead: 2, NEmbd: 8, Bias: bias}))
	}
}

func TestLoadGPTWeightsNanoGPT(t *testing.T) {
	nn.SetSeed(3)
	cfg := GPTConfig{VocabSize: 40, BlockSize: 12, NLayer: 2, NHead: 2, NEmbd: 16, Bias: false}
	m := GPT(cfg)
	path := filepath.Join(t.TempDir(), "gpt.safetensors")
	if err := checkpoint.Save(path, m); err != nil {
		t.Fatal(err)
	}
	got, gotCfg, hf, err := LoadGPTWeights(path, 2)
	if err != nil || hf || gotCfg != cfg {
		t.Fatalf("LoadGPTWeights: hf %v config %+v error %v, want %+v", hf, gotCfg, err, cfg)
	}
	if got.Blocks[0].MLP.GELU.Tanh {
		t.Fatal("nanoGPT weights got the tanh GELU")
	}
	ids := []int{1, 5, 39, 0, 7}
	var a, b []float32
	tensor.NoGrad(func() { a, b = m.Logits(ids, 1, 5).Data(), got.Logits(ids, 1, 5).Data() })
	if !sameValues(a, b) {
		t.Fatal("loaded model's logits differ from the saved model's")
	}
	// The default head count, and heads that do not divide the width.
	if _, c, _, err := LoadGPTWeights(path, 0); err != nil || c.NHead != DefaultGPTHeads {
		t.Fatalf("default heads: %+v %v", c, err)
	}
	if _, _, _, err := LoadGPTWeights(path, 3); err == nil || !strings.Contains(err.Error(), "not a multiple of n_head 3") {
		t.Fatalf("3 heads of width 16: error %v", err)
	}
	if _, _, _, err := LoadGPTWeights(filepath.Join("testdata", "hf_gpt2"), 4); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("head count given for Hugging Face weights: error %v", err)
	}
}
