package models

import (
	"fmt"
	"math"
	"sort"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// GPT-2 style language model with nanoGPT's architecture and parameter
// names. The API:
//
//	cfg := models.DefaultGPTConfig()     // or models.GPTConfig{...}
//	m := models.GPT(cfg)                  // nn.Module, nanoGPT initialisation
//	m.ResetParameters(rng)                // redraw it from an explicit RNG
//	logits := m.Logits(ids, B, T)         // ids []int, len B·T → [B, T, V]
//	logits, loss := m.Loss(ids, targets, B, T) // targets []int; IgnoreIndex skipped
//	logits = m.Forward(nn.IDTensor(ids, B, T)) // the nn.Module form (ddp.Model.Forward)
//	err := m.Check(ids, B, T)             // validation without panics
//	out, err := m.Generate(prompt, n, temperature, topK, rng) // sampling
//
// Forward takes the ids as a [B, T] tensor (of whole numbers) because a
// Go type has one Forward and nn.Module fixes its signature; Logits is the
// []int form. Under DDP (ddp.New(ctx, m, group)) Loss and Logits may be
// called on the model itself: it has no buffers for ddp.Model.Forward to
// broadcast, and the gradient hooks DDP reduces with fire either way.

// IgnoreIndex is the target value Loss skips, nanoGPT's ignore_index=-1.
const IgnoreIndex = -1

// GPTConfig is nanoGPT's GPTConfig.
type GPTConfig struct {
	VocabSize int // number of token ids
	BlockSize int // longest sequence (learned positions)
	NLayer    int
	NHead     int
	NEmbd     int     // must be a multiple of NHead
	Dropout   float32 // embedding, attention and residual dropout
	Bias      bool    // biases in Linear and LayerNorm layers (GPT-2: true)
}

// DefaultGPTConfig is the small byte-level model gotrain trains by
// default: 4 layers, 4 heads, width 128, block 128, vocabulary 256, no
// dropout, biases on.
func DefaultGPTConfig() GPTConfig {
	return GPTConfig{VocabSize: 256, BlockSize: 128, NLayer: 4, NHead: 4, NEmbd: 128, Bias: true}
}

// Validate reports the first impossible setting.
func (c GPTConfig) Validate() error {
	switch {
	case c.VocabSize <= 0 || c.BlockSize <= 0 || c.NLayer <= 0 || c.NHead <= 0 || c.NEmbd <= 0:
		return fmt.Errorf("models: GPT config %+v: sizes must be positive", c)
	case c.NEmbd%c.NHead != 0:
		return fmt.Errorf("models: GPT config: n_embd %d is not a multiple of n_head %d", c.NEmbd, c.NHead)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("models: GPT config: dropout %v is not in [0, 1)", c.Dropout)
	}
	return nil
}

// GPTMLP is the block's feed-forward part: c_fc (width 4·n_embd), exact
// GELU, c_proj, dropout.
type GPTMLP struct {
	nn.Base
	CFc     *nn.LinearLayer
	GELU    *nn.GELULayer
	CProj   *nn.LinearLayer
	Dropout *nn.DropoutLayer
}

// Forward maps [B, T, C] to [B, T, C].
func (m *GPTMLP) Forward(x *tensor.Tensor) *tensor.Tensor {
	a := nn.LinearGELU(m.CFc, m.GELU, x) // c_fc and GELU as one op
	tensor.Recycle(a)                    // only the graph reads it
	return m.Dropout.Forward(m.CProj.Forward(a))
}

// GPTBlock is one pre-LayerNorm transformer block:
// x + attn(ln_1(x)), then x + mlp(ln_2(x)).
type GPTBlock struct {
	nn.Base
	LN1  *nn.LayerNormLayer
	Attn *nn.CausalSelfAttentionLayer
	LN2  *nn.LayerNormLayer
	MLP  *GPTMLP
}

// Forward maps [B, T, C] to [B, T, C].
func (b *GPTBlock) Forward(x *tensor.Tensor) *tensor.Tensor {
	h1 := b.LN1.Forward(x)
	a := b.Attn.Forward(h1)
	x1, h2 := b.LN2.AddForward(x, a) // x + a and ln_2 of it in one pass
	f := b.MLP.Forward(h2)
	tensor.Recycle(h1, a, x1, h2, f) // only the graph reads them
	return tensor.Add(x1, f)
}

// GPTModel is nanoGPT's GPT. Its state dict has nanoGPT's keys:
// transformer.wte.weight, transformer.wpe.weight,
// transformer.h.<i>.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias},
// transformer.ln_f.{weight,bias} and lm_head.weight, the same tensor as
// transformer.wte.weight (tied; NamedParameters lists it once).
type GPTModel struct {
	nn.Base
	Config      GPTConfig
	Transformer *nn.ModuleDictLayer
	WTE, WPE    *nn.EmbeddingLayer
	Drop        *nn.DropoutLayer
	H           *nn.ModuleListLayer
	Blocks      []*GPTBlock
	LNF         *nn.LayerNormLayer
	LMHead      *nn.LinearLayer // weight tied to WTE.Weight
	// ActivationCheckpointing runs each block through
	// nn.CallCheckpointed: its activations are recomputed in backward
	// instead of kept, for one more forward pass of the blocks.
	ActivationCheckpointing bool
}

// GPT builds the model for cfg, initialised as nanoGPT does (see
// ResetParameters) from the generator nn.SetSeed controls. It panics on an
// invalid config (see GPTConfig.Validate).
func GPT(cfg GPTConfig) *GPTModel {
	if err := cfg.Validate(); err != nil {
		panic(err.Error())
	}
	var opts []nn.Option
	if !cfg.Bias {
		opts = append(opts, nn.NoBias())
	}
	p := float64(cfg.Dropout)
	m := &GPTModel{Config: cfg}
	m.WTE = nn.Embedding(cfg.VocabSize, cfg.NEmbd)
	m.WPE = nn.Embedding(cfg.BlockSize, cfg.NEmbd)
	m.Drop = nn.Dropout(p)
	m.H = nn.ModuleList()
	for range cfg.NLayer {
		b := &GPTBlock{
			LN1:  nn.LayerNorm(cfg.NEmbd, opts...),
			Attn: nn.CausalSelfAttention(cfg.NEmbd, cfg.NHead, p, opts...),
			LN2:  nn.LayerNorm(cfg.NEmbd, opts...),
			MLP: &GPTMLP{
				CFc:     nn.Linear(cfg.NEmbd, 4*cfg.NEmbd, opts...),
				GELU:    nn.GELU(),
				CProj:   nn.Linear(4*cfg.NEmbd, cfg.NEmbd, opts...),
				Dropout: nn.Dropout(p),
			},
		}
		b.MLP.Register("c_fc", b.MLP.CFc)
		b.MLP.Register("gelu", b.MLP.GELU)
		b.MLP.Register("c_proj", b.MLP.CProj)
		b.MLP.Register("dropout", b.MLP.Dropout)
		b.Register("ln_1", b.LN1)
		b.Register("attn", b.Attn)
		b.Register("ln_2", b.LN2)
		b.Register("mlp", b.MLP)
		m.H.Append(b)
		m.Blocks = append(m.Blocks, b)
	}
	m.LNF = nn.LayerNorm(cfg.NEmbd, opts...)
	m.Transformer = nn.ModuleDict()
	m.Transformer.Set("wte", m.WTE)
	m.Transformer.Set("wpe", m.WPE)
	m.Transformer.Set("drop", m.Drop)
	m.Transformer.Set("h", m.H)
	m.Transformer.Set("ln_f", m.LNF)
	m.LMHead = nn.Linear(cfg.NEmbd, cfg.VocabSize, nn.NoBias())
	m.LMHead.TieWeight(m.WTE.Weight)
	m.Register("transformer", m.Transformer)
	m.Register("lm_head", m.LMHead)
	nn.WithInitRNG(m.ResetParameters)
	return m
}

// ResetParameters redraws every parameter as nanoGPT's _init_weights:
// Linear and Embedding weights from N(0, 0.02), the residual projections
// (attn.c_proj and mlp.c_proj weights) from N(0, 0.02/√(2·n_layer)),
// biases zero, LayerNorm weights one. Call it on the model itself rather
// than through nn.ResetParameters, which would then re-initialise each
// Linear with PyTorch's default scheme.
func (m *GPTModel) ResetParameters(rng *tensor.RNG) {
	const std = 0.02
	proj := float32(std / math.Sqrt(2*float64(m.Config.NLayer)))
	rng.FillNormal(m.WTE.Weight, 0, std)
	rng.FillNormal(m.WPE.Weight, 0, std)
	lin := func(l *nn.LinearLayer, s float32) {
		rng.FillNormal(l.Weight, 0, s)
		if l.Bias != nil {
			clear(l.Bias.Data())
		}
	}
	for _, b := range m.Blocks {
		b.LN1.ResetParameters(nil)
		lin(b.Attn.CAttn, std)
		lin(b.Attn.CProj, proj)
		b.LN2.ResetParameters(nil)
		lin(b.MLP.CFc, std)
		lin(b.MLP.CProj, proj)
	}
	m.LNF.ResetParameters(nil)
}

// NumParams returns the number of parameters, the tied embedding counted
// once; with nonEmbedding the position embedding is left out, as
// nanoGPT's get_num_params reports.
func (m *GPTModel) NumParams(nonEmbedding bool) int {
	n := nn.NumParameters(m)
	if nonEmbedding {
		n -= m.WPE.Weight.Len()
	}
	return n
}

// Check returns an error for input Logits would panic on: a length that
// is not B·T, T outside [1, block size] (naming both lengths), or a token
// id outside the vocabulary (naming the id and the vocabulary size).
func (m *GPTModel) Check(ids []int, B, T int) error {
	if B <= 0 || T <= 0 || len(ids) != B*T {
		return fmt.Errorf("models: GPT: %d token ids do not form a batch of %d sequences of length %d", len(ids), B, T)
	}
	if T > m.Config.BlockSize {
		return fmt.Errorf("models: GPT: sequence length %d is longer than the block size %d", T, m.Config.BlockSize)
	}
	if err := tensor.CheckIDs(ids, m.Config.VocabSize); err != nil {
		return fmt.Errorf("models: GPT: %w", err)
	}
	return nil
}

// Logits runs the model on B sequences of T token ids (row-major in ids)
// and returns the next-token logits [B, T, VocabSize]. It panics with
// Check's message on bad input.
func (m *GPTModel) Logits(ids []int, B, T int) *tensor.Tensor {
	if err := m.Check(ids, B, T); err != nil {
		panic(err.Error())
	}
	pos := make([]int, T)
	for i := range pos {
		pos[i] = i
	}
	tok, p := m.WTE.Lookup(ids, B, T), m.WPE.Lookup(pos, T)
	x := tensor.Add(tok, p) // [B, T, C] + [T, C]
	// Everything up to the logits is read only by the graph: Backward
	// hands the storage back for the next step.
	tensor.Recycle(tok, p, x)
	x = m.Drop.Forward(x)
	for _, b := range m.Blocks {
		var y *tensor.Tensor
		if m.ActivationCheckpointing {
			y = nn.CallCheckpointed(b, x)
		} else {
			y = nn.Call(b, x) // through Call: FSDP gathers each block around it
		}
		tensor.Recycle(x, y)
		x = y
	}
	h := m.LNF.Forward(x)
	tensor.Recycle(h)
	return m.LMHead.Forward(h)
}

// Loss returns the logits and the mean cross-entropy against targets (one
// next-token id per position, len B·T; IgnoreIndex positions are skipped),
// as nanoGPT's forward(idx, targets).
func (m *GPTModel) Loss(ids, targets []int, B, T int) (logits, loss *tensor.Tensor) {
	logits = m.Logits(ids, B, T)
	return logits, tensor.CrossEntropyIgnore(logits, targets, IgnoreIndex, "mean")
}

// Forward is Logits for ids given as a [B, T] tensor of whole numbers (see
// nn.IDTensor), so the model is an nn.Module that ddp.Model wraps.
func (m *GPTModel) Forward(x *tensor.Tensor) *tensor.Tensor {
	s := x.Shape()
	if len(s) != 2 {
		panic(fmt.Sprintf("models: GPT: input %v is not [B, T] token ids", s))
	}
	ids, err := nn.IDs(x)
	if err != nil {
		panic("models: GPT: " + err.Error())
	}
	return m.Logits(ids, s[0], s[1])
}

// Generate continues the token sequence ids by n tokens, as nanoGPT's
// generate: each step runs the model on the last BlockSize tokens (in
// eval mode, without autograd), divides the last position's logits by
// temperature, keeps the topK most likely tokens (all when topK ≤ 0) and
// samples the next token from their softmax with rng. It returns ids
// followed by the n new tokens and leaves the model's train/eval mode as
// it was. It returns Check's error for bad ids, and an error for a
// temperature that is not positive.
func (m *GPTModel) Generate(ids []int, n int, temperature float32, topK int, rng *tensor.RNG) ([]int, error) {
	if !(temperature > 0) {
		return nil, fmt.Errorf("models: GPT: temperature %v is not positive", temperature)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("models: GPT: Generate needs at least one token to start from")
	}
	if err := tensor.CheckIDs(ids, m.Config.VocabSize); err != nil {
		return nil, fmt.Errorf("models: GPT: %w", err)
	}
	training := m.Training()
	nn.SetTrain(m, false)
	defer nn.SetTrain(m, training)
	out := append([]int(nil), ids...)
	v := m.Config.VocabSize
	probs := make([]float64, v)
	order := make([]int, v)
	tensor.NoGrad(func() {
		for range n {
			ctx := out[max(0, len(out)-m.Config.BlockSize):]
			logits := m.Logits(ctx, 1, len(ctx)).Data()
			last := logits[(len(ctx)-1)*v:]
			out = append(out, sampleLogits(last, temperature, topK, rng, probs, order))
		}
	})
	return out, nil
}

// sampleLogits draws a token from softmax(logits/temperature) restricted
// to the topK largest logits (ties broken by lower id). probs and order
// are scratch of len(logits).
func sampleLogits(logits []float32, temperature float32, topK int, rng *tensor.RNG, probs []float64, order []int) int {
	v := len(logits)
	for i := range order {
		order[i] = i
	}
	if topK <= 0 || topK > v {
		topK = v
	}
	sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
	keep := order[:topK]
	mx := float64(logits[keep[0]]) / float64(temperature)
	var sum float64
	for i, id := range keep {
		p := math.Exp(float64(logits[id])/float64(temperature) - mx)
		probs[i] = p
		sum += p
	}
	u := float64(rng.Float32()) * sum
	for i, id := range keep {
		if u -= probs[i]; u < 0 {
			return id
		}
	}
	return keep[len(keep)-1]
}
