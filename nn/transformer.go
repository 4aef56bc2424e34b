package nn

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/tensor"
)

// EmbeddingLayer maps token ids to learned vectors, PyTorch's
// nn.Embedding. Its state dict entry is "weight" [Num, Dim].
type EmbeddingLayer struct {
	Base
	Num, Dim int
	Weight   *tensor.Tensor // [Num, Dim]
}

// Embedding returns a lookup table of num vectors of size dim, initialised
// like PyTorch from N(0, 1) with the generator SetSeed controls.
func Embedding(num, dim int) *EmbeddingLayer {
	if num < 0 || dim < 0 {
		panic(fmt.Sprintf("nn: Embedding(%d, %d): negative size", num, dim))
	}
	e := &EmbeddingLayer{Num: num, Dim: dim}
	e.Weight = e.RegisterParameter("weight", tensor.Zeros(num, dim))
	withInitRNG(e.ResetParameters)
	return e
}

// ResetParameters redraws the weight from N(0, 1).
func (e *EmbeddingLayer) ResetParameters(rng *tensor.RNG) { rng.FillNormal(e.Weight, 0, 1) }

// String returns "Embedding(num, dim)" as PyTorch prints it.
func (e *EmbeddingLayer) String() string { return fmt.Sprintf("Embedding(%d, %d)", e.Num, e.Dim) }

// Lookup returns the vectors of ids as a tensor of shape [shape..., Dim].
// An id outside [0, Num) panics naming the id and the vocabulary size;
// check untrusted ids with tensor.CheckIDs first.
func (e *EmbeddingLayer) Lookup(ids []int, shape ...int) *tensor.Tensor {
	return tensor.Embedding(e.Weight, ids, shape...)
}

// Forward looks up the ids held (as whole numbers) in x, returning shape
// [x.Shape()..., Dim]; Lookup takes the ids as ints.
func (e *EmbeddingLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	ids, err := IDs(x)
	if err != nil {
		panic("nn: " + e.String() + ": " + err.Error())
	}
	return e.Lookup(ids, x.Shape()...)
}

// IDs converts a tensor of token ids stored as float32 whole numbers (the
// way a Module's Forward receives them) to ints. It fails on a value that
// is not a whole number.
func IDs(x *tensor.Tensor) ([]int, error) {
	d := x.Data()
	ids := make([]int, len(d))
	for i, v := range d {
		if v != float32(math.Trunc(float64(v))) || math.Abs(float64(v)) > 1<<24 {
			return nil, fmt.Errorf("token id %v at position %d is not a whole number up to 2^24", v, i)
		}
		ids[i] = int(v)
	}
	return ids, nil
}

// IDTensor stores token ids in a float32 tensor of the given shape, the
// input form of Forward for modules that start with an embedding. Ids up
// to 2^24 are exact.
func IDTensor(ids []int, shape ...int) *tensor.Tensor {
	d := make([]float32, len(ids))
	for i, id := range ids {
		d[i] = float32(id)
	}
	return tensor.New(d, shape...)
}

// LayerNormLayer normalises over the last dimension and applies a learned
// scale and shift, PyTorch's nn.LayerNorm(dim). Its state dict entries are
// "weight" [Dim] and "bias" [Dim] (none with NoBias, as nanoGPT's
// LayerNorm(bias=False)).
type LayerNormLayer struct {
	Base
	Dim    int
	Eps    float64
	Weight *tensor.Tensor // [Dim], initialised to ones
	Bias   *tensor.Tensor // [Dim], zeros; nil with NoBias
}

// LayerNorm returns a layer normalisation over a last dimension of size
// dim. Options: Eps (default 1e-5), NoBias.
func LayerNorm(dim int, opts ...Option) *LayerNormLayer {
	if dim < 0 {
		panic(fmt.Sprintf("nn: LayerNorm(%d): negative size", dim))
	}
	o := config{eps: 1e-5}.apply("LayerNorm", opts, "Eps", "NoBias")
	l := &LayerNormLayer{Dim: dim, Eps: o.eps}
	l.Weight = l.RegisterParameter("weight", tensor.Zeros(dim))
	if !o.noBias {
		l.Bias = l.RegisterParameter("bias", tensor.Zeros(dim))
	}
	l.ResetParameters(nil)
	return l
}

// ResetParameters sets the weight to ones and the bias to zeros (rng is
// not used).
func (l *LayerNormLayer) ResetParameters(*tensor.RNG) {
	fill(l.Weight, 1)
	if l.Bias != nil {
		fill(l.Bias, 0)
	}
}

// String returns PyTorch's repr, "LayerNorm((dim,), eps=1e-05, elementwise_affine=True)".
func (l *LayerNormLayer) String() string {
	return fmt.Sprintf("LayerNorm((%d,), eps=%s, elementwise_affine=True)", l.Dim, pyFloat(l.Eps))
}

// Forward normalises x [..., Dim]; it panics naming the layer and the
// shape if the last dimension is not Dim.
func (l *LayerNormLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	s := x.Shape()
	if len(s) == 0 || s[len(s)-1] != l.Dim {
		panic(fmt.Sprintf("nn: %s: input %v does not end in %d", l, s, l.Dim))
	}
	return tensor.LayerNorm(x, l.Weight, l.Bias, float32(l.Eps))
}

// pyFloat formats v as Python's repr of a float does for the usual
// hyper-parameters (1e-05, 0.1, 0.0).
func pyFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eIN") {
		s += ".0" // Python marks whole floats
	}
	return s
}

// ModuleListLayer holds modules in a list, PyTorch's nn.ModuleList: its
// children are named "0", "1", … so their parameters are "0.weight" and so
// on. It has no Forward of its own: a model iterates it.
type ModuleListLayer struct {
	Base
	mods []Module
}

// ModuleList returns a list holding mods.
func ModuleList(mods ...Module) *ModuleListLayer {
	l := &ModuleListLayer{}
	for _, m := range mods {
		l.Append(m)
	}
	return l
}

// Append adds m at the end of the list.
func (l *ModuleListLayer) Append(m Module) {
	l.Register(strconv.Itoa(len(l.mods)), m)
	l.mods = append(l.mods, m)
}

// Len returns the number of modules.
func (l *ModuleListLayer) Len() int { return len(l.mods) }

// At returns module i.
func (l *ModuleListLayer) At(i int) Module { return l.mods[i] }

// Forward panics: like PyTorch's, a ModuleList is not callable.
func (l *ModuleListLayer) Forward(*tensor.Tensor) *tensor.Tensor {
	panic("nn: ModuleList has no Forward; call its modules (At) in the model's Forward")
}

// ModuleDictLayer holds named child modules in insertion order, PyTorch's
// nn.ModuleDict, so a model can reproduce a PyTorch model's nesting (and
// state dict names such as "transformer.wte.weight").
type ModuleDictLayer struct {
	Base
	mods map[string]Module
}

// ModuleDict returns an empty ModuleDict; add modules with Set.
func ModuleDict() *ModuleDictLayer { return &ModuleDictLayer{mods: map[string]Module{}} }

// Set adds m under name (which must be new) and returns m.
func (d *ModuleDictLayer) Set(name string, m Module) Module {
	d.Register(name, m)
	d.mods[name] = m
	return m
}

// Get returns the module called name, or nil.
func (d *ModuleDictLayer) Get(name string) Module { return d.mods[name] }

// Forward panics: like PyTorch's, a ModuleDict is not callable.
func (d *ModuleDictLayer) Forward(*tensor.Tensor) *tensor.Tensor {
	panic("nn: ModuleDict has no Forward; call its modules (Get) in the model's Forward")
}

// NumParameters returns the number of scalar parameters of m, counting a
// tensor shared by several modules (tied weights) once, as
// sum(p.numel() for p in model.parameters()) does in PyTorch.
func NumParameters(m Module) int {
	n := 0
	for _, p := range Parameters(m) {
		n += p.Len()
	}
	return n
}

// SetParameter makes the parameter registered as name on this module t
// instead, so that two modules can share one tensor (weight tying, like
// lm_head.weight = wte.weight in PyTorch). t must have the shape of the
// tensor it replaces; the layer's exported field, if any, must be set by
// the caller too (LinearLayer.TieWeight does both).
func (b *Base) SetParameter(name string, t *tensor.Tensor) {
	for i, p := range b.params {
		if p.Name != name {
			continue
		}
		if fmt.Sprint(p.Tensor.Shape()) != fmt.Sprint(t.Shape()) {
			panic(fmt.Sprintf("nn: SetParameter %q: shape %v does not match the registered %v", name, t.Shape(), p.Tensor.Shape()))
		}
		t.SetRequiresGrad(true)
		b.params[i].Tensor = t
		return
	}
	panic(fmt.Sprintf("nn: SetParameter: no parameter %q", name))
}

// TieWeight makes the layer use w (shape [Out, In]) as its weight, shared
// with whatever else holds w: the gradient of w then accumulates both uses
// in one backward pass, its gradient hooks (DDP's) fire once after the
// last, and NamedParameters lists it once, under its first name.
func (l *LinearLayer) TieWeight(w *tensor.Tensor) {
	l.SetParameter("weight", w)
	l.Weight = w
}

// CausalSelfAttentionLayer is multi-head masked self-attention as in
// GPT-2 (nanoGPT's CausalSelfAttention): one Linear "c_attn" projecting to
// queries, keys and values, fused causal scaled-dot-product attention
// over NHead heads, and an output Linear "c_proj". Its state dict entries
// are c_attn.weight [3·NEmbd, NEmbd], c_attn.bias, c_proj.weight [NEmbd,
// NEmbd] and c_proj.bias (no biases with NoBias).
type CausalSelfAttentionLayer struct {
	Base
	NEmbd, NHead int
	CAttn        *LinearLayer
	CProj        *LinearLayer
	// AttnDropout drops attention probabilities and ResidDropout the
	// output, both with the probability given to CausalSelfAttention.
	AttnDropout, ResidDropout *DropoutLayer
}

// CausalSelfAttention returns a causal self-attention layer of width nEmbd
// over nHead heads (nEmbd must be a multiple of nHead) with dropout
// probability dropout. Options: NoBias.
func CausalSelfAttention(nEmbd, nHead int, dropout float64, opts ...Option) *CausalSelfAttentionLayer {
	if nHead <= 0 || nEmbd <= 0 || nEmbd%nHead != 0 {
		panic(fmt.Sprintf("nn: CausalSelfAttention(n_embd=%d, n_head=%d): n_embd must be a positive multiple of n_head", nEmbd, nHead))
	}
	config{}.apply("CausalSelfAttention", opts, "NoBias")
	a := &CausalSelfAttentionLayer{NEmbd: nEmbd, NHead: nHead}
	a.CAttn = Linear(nEmbd, 3*nEmbd, opts...)
	a.CProj = Linear(nEmbd, nEmbd, opts...)
	a.AttnDropout = Dropout(dropout)
	a.ResidDropout = Dropout(dropout)
	a.Register("c_attn", a.CAttn)
	a.Register("c_proj", a.CProj)
	a.Register("attn_dropout", a.AttnDropout)
	a.Register("resid_dropout", a.ResidDropout)
	return a
}

// Forward maps x [B, T, NEmbd] to [B, T, NEmbd]: each position attends to
// itself and the positions before it. The attention is one fused op that
// never holds the T×T scores, also with attention dropout in training,
// whose masks it regenerates from a seed (tensor.SelfAttentionQKVDropout)
// rather than storing them. It panics naming the layer and both shapes
// when x is not [B, T, NEmbd].
func (a *CausalSelfAttentionLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	s := x.Shape()
	if len(s) != 3 || s[2] != a.NEmbd {
		panic(fmt.Sprintf("nn: CausalSelfAttention(n_embd=%d, n_head=%d): input %v does not match [B, T, %d]",
			a.NEmbd, a.NHead, s, a.NEmbd))
	}
	qkv := a.CAttn.Forward(x)
	// The fused attention reads the heads straight out of qkv and writes
	// them side by side in [B, T, C]: no head split or merge copies.
	var y *tensor.Tensor
	if a.Training() && a.AttnDropout.P > 0 {
		y = tensor.SelfAttentionQKVDropout(qkv, a.NHead, true, float32(a.AttnDropout.P), a.AttnDropout.rng)
	} else {
		y = tensor.SelfAttentionQKV(qkv, a.NHead, true)
	}
	// These results own their storage and only the graph reads them:
	// Backward hands it back for the next step (see tensor.Recycle).
	tensor.Recycle(qkv, y)
	return a.ResidDropout.Forward(a.CProj.Forward(y))
}

// MultiheadAttentionLayer is PyTorch's nn.MultiheadAttention(embed_dim,
// num_heads, batch_first=True) without dropout: inputs are [B, T, E]. Its
// state dict entries are in_proj_weight [3E, E], in_proj_bias [3E],
// out_proj.weight [E, E] and out_proj.bias [E] (no biases with NoBias).
// The attention itself is the fused tensor.ScaledDotProductAttention.
type MultiheadAttentionLayer struct {
	Base
	EmbedDim, NumHeads int
	// Causal masks each query from later keys in Forward (PyTorch: a
	// boolean upper-triangular attn_mask).
	Causal       bool
	InProjWeight *tensor.Tensor // [3E, E]: query, key and value projections stacked
	InProjBias   *tensor.Tensor // [3E]; nil with NoBias
	OutProj      *LinearLayer
}

// MultiheadAttention returns a multi-head attention layer of width
// embedDim over numHeads heads (embedDim must be a multiple of numHeads),
// initialised like PyTorch: in_proj_weight Xavier-uniform, in_proj_bias
// and out_proj.bias zero, out_proj.weight as a Linear's. Options: NoBias.
func MultiheadAttention(embedDim, numHeads int, opts ...Option) *MultiheadAttentionLayer {
	if numHeads <= 0 || embedDim <= 0 || embedDim%numHeads != 0 {
		panic(fmt.Sprintf("nn: MultiheadAttention(embed_dim=%d, num_heads=%d): embed_dim must be a positive multiple of num_heads", embedDim, numHeads))
	}
	o := config{}.apply("MultiheadAttention", opts, "NoBias")
	a := &MultiheadAttentionLayer{EmbedDim: embedDim, NumHeads: numHeads}
	a.InProjWeight = a.RegisterParameter("in_proj_weight", tensor.Zeros(3*embedDim, embedDim))
	if !o.noBias {
		a.InProjBias = a.RegisterParameter("in_proj_bias", tensor.Zeros(3*embedDim))
	}
	a.OutProj = Linear(embedDim, embedDim, opts...)
	a.Register("out_proj", a.OutProj)
	withInitRNG(a.ResetParameters)
	return a
}

// ResetParameters redraws the parameters as PyTorch's _reset_parameters.
func (a *MultiheadAttentionLayer) ResetParameters(rng *tensor.RNG) {
	e := float64(a.EmbedDim)
	bound := float32(math.Sqrt(6 / (e + 3*e))) // xavier_uniform_ on [3E, E]
	rng.FillUniform(a.InProjWeight, -bound, bound)
	if a.InProjBias != nil {
		fill(a.InProjBias, 0)
	}
	a.OutProj.ResetParameters(rng)
	if a.OutProj.Bias != nil {
		fill(a.OutProj.Bias, 0)
	}
}

// String describes the layer as PyTorch prints it.
func (a *MultiheadAttentionLayer) String() string { return Repr(a) }

// Forward is self-attention, Attend(x, x, x, Causal).
func (a *MultiheadAttentionLayer) Forward(x *tensor.Tensor) *tensor.Tensor {
	return a.Attend(x, x, x, a.Causal)
}

// Attend maps query [B, Tq, E] attending over key and value [B, Tk, E] to
// [B, Tq, E], PyTorch's forward(query, key, value, need_weights=False).
// It panics naming the layer and the shapes when they do not fit.
func (a *MultiheadAttentionLayer) Attend(query, key, value *tensor.Tensor, causal bool) *tensor.Tensor {
	qs, ks, vs := query.Shape(), key.Shape(), value.Shape()
	e := a.EmbedDim
	if len(qs) != 3 || len(ks) != 3 || len(vs) != 3 || qs[2] != e || ks[2] != e || vs[2] != e ||
		ks[0] != qs[0] || vs[0] != qs[0] || ks[1] != vs[1] {
		panic(fmt.Sprintf("nn: MultiheadAttention(embed_dim=%d, num_heads=%d): query %v, key %v and value %v do not fit [B, Tq, %d], [B, Tk, %d], [B, Tk, %d]",
			e, a.NumHeads, qs, ks, vs, e, e, e))
	}
	h, dh := a.NumHeads, e/a.NumHeads
	project := func(x *tensor.Tensor, i int) *tensor.Tensor {
		w := tensor.Narrow(a.InProjWeight, 0, i*e, e)
		var b *tensor.Tensor
		if a.InProjBias != nil {
			b = tensor.Narrow(a.InProjBias, 0, i*e, e)
		}
		s := x.Shape()
		y := tensor.Linear(x, w, b).Reshape(s[0], s[1], h, dh)
		return tensor.Permute(y, 0, 2, 1, 3) // [B, H, T, Dh]
	}
	y := tensor.ScaledDotProductAttention(project(query, 0), project(key, 1), project(value, 2), causal)
	y = tensor.Permute(y, 0, 2, 1, 3).Reshape(qs[0], qs[1], e)
	return a.OutProj.Forward(y)
}
