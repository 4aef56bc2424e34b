package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// Hugging Face's GPT-2 (transformers' GPT2LMHeadModel) has nanoGPT's
// architecture and, but for two details, its parameter names: the keys may
// lack the "transformer." prefix (the model.safetensors of "gpt2" on the
// Hub has none), and the four projections are Conv1D layers whose weights
// are stored [in, out], the transpose of nn.Linear's [out, in]. The files
// may also hold the attention's mask buffers (h.<i>.attn.bias and
// h.<i>.attn.masked_bias), which carry no weights, and lm_head.weight, a
// copy of the tied token embedding.

// hfConv1D lists the parameter suffixes stored [in, out] by Hugging Face.
var hfConv1D = []string{".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}

// HFGPT2Config is the part of a Hugging Face GPT-2 config.json that
// decides the model's shape and arithmetic.
type HFGPT2Config struct {
	ModelType           string   `json:"model_type"`
	NLayer              int      `json:"n_layer"`
	NHead               int      `json:"n_head"`
	NEmbd               int      `json:"n_embd"`
	NPositions          int      `json:"n_positions"`
	VocabSize           int      `json:"vocab_size"`
	NInner              *int     `json:"n_inner"`
	LayerNormEpsilon    *float64 `json:"layer_norm_epsilon"`
	ActivationFunction  string   `json:"activation_function"`
	ScaleAttnWeights    *bool    `json:"scale_attn_weights"`
	ScaleAttnByLayerIdx bool     `json:"scale_attn_by_inverse_layer_idx"`
	TieWordEmbeddings   *bool    `json:"tie_word_embeddings"`
	AddCrossAttention   bool     `json:"add_cross_attention"`
}

// ReadHFGPT2Config reads a Hugging Face GPT-2 config.json and returns the
// GPTConfig of the model it describes (no dropout: the loaded model is for
// inference), its LayerNorm epsilon and whether its GELU is the tanh
// approximation (activation_function "gelu_new", GPT-2's, or
// "gelu_pytorch_tanh") or the exact one ("gelu"). Settings models.GPT
// cannot reproduce (another activation, an inner width other than
// 4·n_embd, attention scaled by layer index or not scaled, untied output
// embeddings, cross-attention) are an error naming the setting.
func ReadHFGPT2Config(path string) (cfg GPTConfig, eps float64, tanhGELU bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return GPTConfig{}, 0, false, fmt.Errorf("models: GPT-2 config: %w", err)
	}
	var hc HFGPT2Config
	if err := json.Unmarshal(b, &hc); err != nil {
		return GPTConfig{}, 0, false, fmt.Errorf("models: GPT-2 config %s: %w", path, err)
	}
	bad := func(format string, args ...any) (GPTConfig, float64, bool, error) {
		return GPTConfig{}, 0, false, fmt.Errorf("models: GPT-2 config %s: "+format, append([]any{path}, args...)...)
	}
	if hc.ModelType != "" && hc.ModelType != "gpt2" {
		return bad("model_type %q is not gpt2", hc.ModelType)
	}
	switch hc.ActivationFunction {
	case "", "gelu_new", "gelu_pytorch_tanh":
		tanhGELU = true
	case "gelu":
	default:
		return bad("activation_function %q is not supported (gelu_new, gelu_pytorch_tanh or gelu)", hc.ActivationFunction)
	}
	switch {
	case hc.NInner != nil && *hc.NInner != 4*hc.NEmbd:
		return bad("n_inner %d is not 4·n_embd = %d", *hc.NInner, 4*hc.NEmbd)
	case hc.ScaleAttnWeights != nil && !*hc.ScaleAttnWeights:
		return bad("scale_attn_weights false is not supported")
	case hc.ScaleAttnByLayerIdx:
		return bad("scale_attn_by_inverse_layer_idx true is not supported")
	case hc.TieWordEmbeddings != nil && !*hc.TieWordEmbeddings:
		return bad("tie_word_embeddings false (a separate lm_head) is not supported")
	case hc.AddCrossAttention:
		return bad("add_cross_attention true is not supported")
	}
	eps = 1e-5
	if hc.LayerNormEpsilon != nil {
		eps = *hc.LayerNormEpsilon
	}
	if !(eps > 0 && eps < 1) {
		return bad("layer_norm_epsilon %v is not in (0, 1)", eps)
	}
	cfg = GPTConfig{VocabSize: hc.VocabSize, BlockSize: hc.NPositions, NLayer: hc.NLayer, NHead: hc.NHead, NEmbd: hc.NEmbd, Bias: true}
	if err := cfg.Validate(); err != nil {
		return bad("%v", err)
	}
	return cfg, eps, tanhGELU, nil
}

// LoadHFGPT2 loads a Hugging Face GPT-2 model (GPT2LMHeadModel or
// GPT2Model weights) from a safetensors file, or from a directory holding
// model.safetensors, into a models.GPT with the tanh GELU and LayerNorm
// epsilon the config asks for. The config is the config.json beside the
// file; without one it is inferred from the weights' shapes, with n_embd/64
// heads (GPT-2's head width in every published size) and GPT-2's gelu_new
// and epsilon 1e-5, and a warning says so. Keys may carry the
// "transformer." prefix or not; the attention mask buffers are ignored and
// lm_head.weight, if present, must equal the token embedding. A file of
// another model is one error listing the missing, unexpected and
// mis-shaped keys.
func LoadHFGPT2(path string) (*GPTModel, GPTConfig, error) {
	path, err := hfWeightsPath(path)
	if err != nil {
		return nil, GPTConfig{}, err
	}
	entries, _, err := checkpoint.ReadTensorsFile(path)
	if err != nil {
		return nil, GPTConfig{}, fmt.Errorf("models: %w", err)
	}
	return loadHFGPT2(path, entries)
}

func loadHFGPT2(path string, entries []checkpoint.Entry) (*GPTModel, GPTConfig, error) {
	w, err := hfCanonical(path, entries)
	if err != nil {
		return nil, GPTConfig{}, err
	}
	cfgPath := filepath.Join(filepath.Dir(path), "config.json")
	var (
		cfg      GPTConfig
		eps      = 1e-5
		tanhGELU = true
	)
	if _, serr := os.Stat(cfgPath); serr == nil {
		if cfg, eps, tanhGELU, err = ReadHFGPT2Config(cfgPath); err != nil {
			return nil, GPTConfig{}, err
		}
	} else if errors.Is(serr, fs.ErrNotExist) {
		shapes := make(map[string][]int, len(w))
		for k, t := range w {
			shapes[k] = t.Shape()
		}
		if cfg, err = inferHFGPT2Config(path, shapes); err != nil {
			return nil, GPTConfig{}, err
		}
		slog.Warn("models: no config.json beside the GPT-2 weights: shapes inferred, heads n_embd/64, gelu_new, epsilon 1e-5",
			"file", path, "n_layer", cfg.NLayer, "n_head", cfg.NHead, "n_embd", cfg.NEmbd, "n_positions", cfg.BlockSize, "vocab_size", cfg.VocabSize)
	} else {
		return nil, GPTConfig{}, fmt.Errorf("models: GPT-2 config: %w", serr)
	}
	shapes := make(map[string][]int, len(w))
	for k, t := range w {
		shapes[k] = t.Shape()
	}
	if err := checkHFGPT2Shapes(path, cfg, shapes); err != nil {
		return nil, GPTConfig{}, err
	}
	if lm, ok := w["lm_head.weight"]; ok {
		if !sameValues(lm.Data(), w["wte.weight"].Data()) {
			return nil, GPTConfig{}, fmt.Errorf("models: %s: lm_head.weight differs from wte.weight; untied output embeddings are not supported", path)
		}
	}
	m := GPT(cfg)
	for _, e := range nn.StateDict(m) {
		src := w[strings.TrimPrefix(e.Name, "transformer.")]
		if src == nil && e.Tensor == m.WTE.Weight {
			continue // lm_head.weight, tied to wte.weight
		}
		if hfTransposed(e.Name) {
			transposeInto(e.Tensor.Data(), src.Data(), src.Shape()[0], src.Shape()[1])
		} else {
			copy(e.Tensor.Data(), src.Data())
		}
	}
	m.setArithmetic(eps, tanhGELU)
	return m, cfg, nil
}

// DefaultGPTHeads is the head count LoadGPTWeights gives a nanoGPT-named
// model when none is given: gotrain train gpt's default --n-head.
const DefaultGPTHeads = 4

// LoadGPTWeights loads a GPT from a safetensors file (or a directory
// holding model.safetensors) in either naming, told apart by the layout of
// the first block's c_attn weight:
//
//   - Hugging Face GPT-2's ([n_embd, 3·n_embd], Conv1D): as LoadHFGPT2;
//     hf is true.
//   - nanoGPT's ([3·n_embd, n_embd], nn.Linear), as `gotrain train gpt
//     --save` and nanoGPT's state_dict() write them: the sizes come from
//     the shapes, biases from the presence of transformer.ln_f.bias, the
//     head count from nHead (0 means DefaultGPTHeads), and the arithmetic
//     is nanoGPT's (exact GELU, epsilon 1e-5). A duplicate lm_head.weight
//     must equal the token embedding.
//
// nHead must be 0 for Hugging Face weights, whose config says it.
func LoadGPTWeights(path string, nHead int) (m *GPTModel, cfg GPTConfig, hf bool, err error) {
	path, err = hfWeightsPath(path)
	if err != nil {
		return nil, GPTConfig{}, false, err
	}
	entries, _, err := checkpoint.ReadTensorsFile(path)
	if err != nil {
		return nil, GPTConfig{}, false, fmt.Errorf("models: %w", err)
	}
	byName := make(map[string]*tensor.Tensor, len(entries))
	for _, e := range entries {
		byName[e.Name] = e.Tensor
	}
	wte, attn := byName["transformer.wte.weight"], byName["transformer.h.0.attn.c_attn.weight"]
	if wte == nil || attn == nil || len(wte.Shape()) != 2 || len(attn.Shape()) != 2 || attn.Shape()[1] != wte.Shape()[1] {
		// No nanoGPT layout: Hugging Face's, or an error listing the keys.
		if nHead != 0 {
			return nil, GPTConfig{}, false, fmt.Errorf("models: %s: Hugging Face GPT-2 weights take the head count from config.json, not from a given %d", path, nHead)
		}
		m, cfg, err = loadHFGPT2(path, entries)
		return m, cfg, true, err
	}
	if nHead == 0 {
		nHead = DefaultGPTHeads
	}
	n := 0
	for ; byName["transformer.h."+strconv.Itoa(n)+".attn.c_attn.weight"] != nil; n++ {
	}
	_, bias := byName["transformer.ln_f.bias"]
	cfg = GPTConfig{VocabSize: wte.Shape()[0], NEmbd: wte.Shape()[1], NLayer: n, NHead: nHead, Bias: bias}
	if wpe := byName["transformer.wpe.weight"]; wpe != nil && len(wpe.Shape()) == 2 {
		cfg.BlockSize = wpe.Shape()[0]
	}
	if err := cfg.Validate(); err != nil {
		return nil, GPTConfig{}, false, fmt.Errorf("models: %s: nanoGPT weights of n_layer=%d n_embd=%d block_size=%d vocab_size=%d with %d heads: %s",
			path, cfg.NLayer, cfg.NEmbd, cfg.BlockSize, cfg.VocabSize, nHead, strings.TrimPrefix(err.Error(), "models: GPT config: "))
	}
	if lm := byName["lm_head.weight"]; lm != nil {
		if !sameValues(lm.Data(), wte.Data()) {
			return nil, GPTConfig{}, false, fmt.Errorf("models: %s: lm_head.weight differs from transformer.wte.weight; untied output embeddings are not supported", path)
		}
	} else {
		byName["lm_head.weight"] = wte
	}
	m = GPT(cfg)
	if err := nn.LoadStateDict(m, byName, true); err != nil {
		return nil, GPTConfig{}, false, fmt.Errorf("models: %s is not a nanoGPT checkpoint of n_layer=%d n_embd=%d block_size=%d vocab_size=%d: %w",
			path, cfg.NLayer, cfg.NEmbd, cfg.BlockSize, cfg.VocabSize, err)
	}
	return m, cfg, false, nil
}

// setArithmetic sets every LayerNorm's epsilon and the GELU form.
func (m *GPTModel) setArithmetic(eps float64, tanhGELU bool) {
	for _, b := range m.Blocks {
		b.LN1.Eps, b.LN2.Eps = eps, eps
		b.MLP.GELU.Tanh = tanhGELU
	}
	m.LNF.Eps = eps
}

// hfWeightsPath returns path, or path/model.safetensors for a directory.
func hfWeightsPath(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("models: GPT-2 weights: %w", err)
	}
	if st.IsDir() {
		return filepath.Join(path, "model.safetensors"), nil
	}
	return path, nil
}

// hfCanonical returns the file's tensors by their Hugging Face names
// without the "transformer." prefix, the mask buffers left out.
func hfCanonical(path string, entries []checkpoint.Entry) (map[string]*tensor.Tensor, error) {
	w := make(map[string]*tensor.Tensor, len(entries))
	for _, e := range entries {
		name := strings.TrimPrefix(e.Name, "transformer.")
		if isHFMaskBuffer(name) {
			continue
		}
		if _, dup := w[name]; dup {
			return nil, fmt.Errorf("models: %s: %s is stored both with and without the \"transformer.\" prefix", path, name)
		}
		w[name] = e.Tensor
	}
	return w, nil
}

// isHFMaskBuffer reports whether name is h.<i>.attn.bias or
// h.<i>.attn.masked_bias, the causal mask Hugging Face may save.
func isHFMaskBuffer(name string) bool {
	rest, ok := strings.CutPrefix(name, "h.")
	if !ok {
		return false
	}
	i, tail, ok := strings.Cut(rest, ".")
	if _, err := strconv.Atoi(i); err != nil || !ok {
		return false
	}
	return tail == "attn.bias" || tail == "attn.masked_bias"
}

// hfTransposed reports whether the nanoGPT parameter name is a Conv1D
// weight in Hugging Face's layout.
func hfTransposed(name string) bool {
	for _, s := range hfConv1D {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// inferHFGPT2Config derives the config from the shapes of wte.weight,
// wpe.weight and the number of blocks, with n_embd/64 heads.
func inferHFGPT2Config(path string, shapes map[string][]int) (GPTConfig, error) {
	wte, wpe := shapes["wte.weight"], shapes["wpe.weight"]
	if len(wte) != 2 || len(wpe) != 2 {
		return GPTConfig{}, fmt.Errorf("models: %s is not a GPT-2 checkpoint: no 2-D wte.weight and wpe.weight (keys: %s)", path, keyList(shapes, 8))
	}
	n := 0
	for n = 0; ; n++ {
		if _, ok := shapes["h."+strconv.Itoa(n)+".ln_1.weight"]; !ok {
			break
		}
	}
	c := wte[1]
	if c%64 != 0 || n == 0 {
		return GPTConfig{}, fmt.Errorf("models: %s: cannot infer the GPT-2 config (n_embd %d, %d blocks): put its config.json beside it", path, c, n)
	}
	cfg := GPTConfig{VocabSize: wte[0], BlockSize: wpe[0], NLayer: n, NHead: c / 64, NEmbd: c, Bias: true}
	if err := cfg.Validate(); err != nil {
		return GPTConfig{}, fmt.Errorf("models: %s: %w", path, err)
	}
	return cfg, nil
}

// GPTShapes returns the shape of every entry of GPT(cfg)'s state dict by
// name (nanoGPT's names and nn.Linear layouts), without building it.
func GPTShapes(cfg GPTConfig) map[string][]int {
	v, b, c := cfg.VocabSize, cfg.BlockSize, cfg.NEmbd
	s := map[string][]int{"transformer.wte.weight": {v, c}, "transformer.wpe.weight": {b, c}}
	lin := func(name string, out, in int) {
		s[name+".weight"] = []int{out, in}
		if cfg.Bias {
			s[name+".bias"] = []int{out}
		}
	}
	ln := func(name string) {
		s[name+".weight"] = []int{c}
		if cfg.Bias {
			s[name+".bias"] = []int{c}
		}
	}
	for i := range cfg.NLayer {
		p := "transformer.h." + strconv.Itoa(i) + "."
		ln(p + "ln_1")
		lin(p+"attn.c_attn", 3*c, c)
		lin(p+"attn.c_proj", c, c)
		ln(p + "ln_2")
		lin(p+"mlp.c_fc", 4*c, c)
		lin(p+"mlp.c_proj", c, 4*c)
	}
	ln("transformer.ln_f")
	s["lm_head.weight"] = []int{v, c} // tied to transformer.wte.weight
	return s
}

// checkHFGPT2Shapes checks that the Hugging Face names and shapes (prefix
// and mask buffers removed) are those of a GPT-2 of cfg, listing every
// missing, unexpected and mis-shaped key in one error.
func checkHFGPT2Shapes(path string, cfg GPTConfig, shapes map[string][]int) error {
	want := make(map[string][]int)
	for name, s := range GPTShapes(cfg) {
		if name == "lm_head.weight" {
			continue // optional: a copy of the tied wte.weight
		}
		name = strings.TrimPrefix(name, "transformer.")
		if hfTransposed(name) {
			s = []int{s[1], s[0]}
		}
		want[name] = s
	}
	var missing, unexpected, misshaped []string
	for name, s := range want {
		got, ok := shapes[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case fmt.Sprint(got) != fmt.Sprint(s):
			misshaped = append(misshaped, fmt.Sprintf("%s %v (want %v)", name, got, s))
		}
	}
	for name, s := range shapes {
		if _, ok := want[name]; ok {
			continue
		}
		if name == "lm_head.weight" && fmt.Sprint(s) == fmt.Sprint(want["wte.weight"]) {
			continue
		}
		unexpected = append(unexpected, name)
	}
	if len(missing)+len(unexpected)+len(misshaped) == 0 {
		return nil
	}
	var parts []string
	for _, l := range []struct {
		what  string
		names []string
	}{{"missing", missing}, {"unexpected", unexpected}, {"mis-shaped", misshaped}} {
		if len(l.names) > 0 {
			sort.Strings(l.names)
			parts = append(parts, fmt.Sprintf("%d %s: %s", len(l.names), l.what, shortList(l.names, 6)))
		}
	}
	return fmt.Errorf("models: %s is not a GPT-2 checkpoint of n_layer=%d n_head=%d n_embd=%d n_positions=%d vocab_size=%d: %s",
		path, cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.VocabSize, strings.Join(parts, "; "))
}

// shortList joins the first n names and says how many more there are.
func shortList(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

// keyList lists up to n of the keys of shapes, sorted.
func keyList(shapes map[string][]int, n int) string {
	names := make([]string, 0, len(shapes))
	for k := range shapes {
		names = append(names, k)
	}
	sort.Strings(names)
	return shortList(names, n)
}

// transposeInto writes the transpose of src [rows, cols] into dst [cols, rows].
func transposeInto(dst, src []float32, rows, cols int) {
	for r := range rows {
		row := src[r*cols : (r+1)*cols]
		for c, v := range row {
			dst[c*rows+r] = v
		}
	}
}

// sameValues reports whether a and b hold the same numbers.
func sameValues(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
