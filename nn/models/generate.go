package models

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// GenerateOptions says how Generate picks each new token.
type GenerateOptions struct {
	// MaxNewTokens is how many tokens to generate at most.
	MaxNewTokens int
	// Temperature divides the logits before sampling; 0 picks the most
	// likely token (greedy, ties to the lower id, as torch.argmax).
	Temperature float64
	// TopK keeps only the TopK most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to at least TopP (nucleus sampling, Hugging Face's
	// TopPLogitsWarper), never fewer than one; 0 or 1 keeps all. Applied
	// after TopK.
	TopP float64
	// Seed seeds the sampling; the same seed, model and prompt give the
	// same tokens.
	Seed uint64
	// Stop ends generation after any of these ids (included in the
	// output), e.g. the tokenizer's end of text.
	Stop []int
	// NoCache recomputes the whole context for every token, as nanoGPT's
	// generate, instead of keeping each layer's keys and values: the same
	// tokens, slower. For comparisons.
	NoCache bool
}

// Check reports the first impossible option.
func (o GenerateOptions) Check() error {
	switch {
	case o.MaxNewTokens < 0:
		return fmt.Errorf("models: generate: max new tokens %d is negative", o.MaxNewTokens)
	case !(o.Temperature >= 0) || math.IsInf(o.Temperature, 0):
		return fmt.Errorf("models: generate: temperature %v is not a finite number >= 0", o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("models: generate: top-k %d is negative", o.TopK)
	case !(o.TopP >= 0 && o.TopP <= 1):
		return fmt.Errorf("models: generate: top-p %v is not in [0, 1]", o.TopP)
	}
	return nil
}

// Generate continues prompt by up to opts.MaxNewTokens tokens and returns
// the new ones (see GenerateFunc).
func Generate(ctx context.Context, m *GPTModel, prompt []int, opts GenerateOptions) ([]int, error) {
	var out []int
	err := GenerateFunc(ctx, m, prompt, opts, func(id int) error {
		out = append(out, id)
		return nil
	})
	return out, err
}

// GenerateFunc continues prompt, calling emit with each new token as soon
// as it is chosen; an error from emit, or ctx ending, stops it with that
// error. It runs without autograd and in eval mode (restored after). It
// keeps a cache of every layer's keys and values, so that each new token
// costs one position's forward pass; the context is the last BlockSize
// tokens, as nanoGPT crops it, so once the sequence outgrows the block
// every token recomputes the cache for the shifted window (the positions
// are learned absolute ones). A prompt that is empty or holds an id
// outside the vocabulary, or bad options, are an error before any work.
func GenerateFunc(ctx context.Context, m *GPTModel, prompt []int, opts GenerateOptions, emit func(id int) error) error {
	if err := opts.Check(); err != nil {
		return err
	}
	if len(prompt) == 0 {
		return fmt.Errorf("models: generate: empty prompt: at least one token is needed to start from")
	}
	if err := tensor.CheckIDs(prompt, m.Config.VocabSize); err != nil {
		return fmt.Errorf("models: generate: prompt: %w", err)
	}
	training := m.Training()
	nn.SetTrain(m, false)
	defer nn.SetTrain(m, training)
	s := newSampler(opts, m.Config.VocabSize)
	seq := slices.Clone(prompt)
	bs := m.Config.BlockSize
	var cache *kvCache
	if !opts.NoCache {
		cache = newKVCache(m)
	}
	var err error
	tensor.NoGrad(func() {
		for range opts.MaxNewTokens {
			if err = ctx.Err(); err != nil {
				return
			}
			var logits []float32
			if cache != nil {
				logits = cache.next(seq)
			} else {
				window := seq[max(0, len(seq)-bs):]
				all := m.Logits(window, 1, len(window)).Data()
				logits = all[(len(window)-1)*m.Config.VocabSize:]
			}
			id := s.pick(logits)
			seq = append(seq, id)
			if err = emit(id); err != nil {
				return
			}
			if slices.Contains(opts.Stop, id) {
				return
			}
		}
	})
	return err
}

// kvCache holds every layer's keys and values of the positions run so far.
type kvCache struct {
	m    *GPTModel
	k, v [][]float32 // per layer, [BlockSize, NEmbd]
	n    int         // positions held
	ran  int         // positions run through the model in all
	att  []float32   // attention weights of one query, scratch
}

func newKVCache(m *GPTModel) *kvCache {
	c := &kvCache{m: m, att: make([]float32, m.Config.BlockSize)}
	size := m.Config.BlockSize * m.Config.NEmbd
	for range m.Blocks {
		c.k = append(c.k, make([]float32, size))
		c.v = append(c.v, make([]float32, size))
	}
	return c
}

// next returns the next-token logits of seq, which extends the sequence
// of the previous call by one token (or this is the first call), from its last
// BlockSize tokens: one position's forward pass while the sequence fits
// the block, the whole window once it slides.
func (c *kvCache) next(seq []int) []float32 {
	bs := c.m.Config.BlockSize
	if c.n > 0 && c.n+1 == len(seq) && len(seq) <= bs {
		return c.forward(seq[c.n:])
	}
	c.n = 0
	return c.forward(seq[max(0, len(seq)-bs):])
}

// forward runs ids at positions n, n+1, … (n+len(ids) ≤ BlockSize),
// adds their keys and values to the cache and returns the logits of the
// last one.
func (c *kvCache) forward(ids []int) []float32 {
	m, L, C := c.m, len(ids), c.m.Config.NEmbd
	x := tensor.Zeros(1, L, C)
	xd, wte, wpe := x.Data(), m.WTE.Weight.Data(), m.WPE.Weight.Data()
	for i, id := range ids {
		row := xd[i*C : (i+1)*C]
		copy(row, wte[id*C:(id+1)*C])
		kernels.Add(row, wpe[(c.n+i)*C:(c.n+i+1)*C])
	}
	// One position's projections are matrix-vector products: a matrix
	// product would spend most of its time packing the weights.
	lin := func(l *nn.LinearLayer, x *tensor.Tensor) *tensor.Tensor {
		if L == 1 {
			return tensor.New(matVec(l, x.Data()), 1, 1, l.Out)
		}
		return l.Forward(x)
	}
	for li, b := range m.Blocks {
		qkv := lin(b.Attn.CAttn, b.LN1.Forward(x))
		qd := qkv.Data()
		for i := range L {
			p := c.n + i
			copy(c.k[li][p*C:(p+1)*C], qd[i*3*C+C:i*3*C+2*C])
			copy(c.v[li][p*C:(p+1)*C], qd[i*3*C+2*C:i*3*C+3*C])
		}
		var y *tensor.Tensor
		if c.n == 0 {
			y = tensor.SelfAttentionQKV(qkv, b.Attn.NHead, true)
		} else {
			y = c.attend(li, qd, L, b.Attn.NHead)
		}
		x = tensor.Add(x, lin(b.Attn.CProj, y))
		h := lin(b.MLP.CFc, b.LN2.Forward(x))
		x = tensor.Add(x, lin(b.MLP.CProj, b.MLP.GELU.Forward(h)))
	}
	c.n += L
	c.ran += L
	last := m.LNF.Forward(tensor.New(slices.Clone(x.Data()[(L-1)*C:L*C]), 1, C))
	return matVec(m.LMHead, last.Data())
}

// matVec returns l's output for one input row x: Weight·x + Bias, each
// output a dot product of a weight row, the rows split among the CPUs.
func matVec(l *nn.LinearLayer, x []float32) []float32 {
	out, in := l.Out, l.In
	w := l.Weight.Data()
	var bias []float32
	if l.Bias != nil {
		bias = l.Bias.Data()
	}
	y := make([]float32, out)
	rows := func(lo, hi int) {
		for o := lo; o < hi; o++ {
			s := kernels.Dot(x, w[o*in:(o+1)*in])
			if bias != nil {
				s += bias[o]
			}
			y[o] = s
		}
	}
	n := runtime.GOMAXPROCS(0)
	if n == 1 || out*in < 1<<16 {
		rows(0, out)
		return y
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { rows(i*out/n, (i+1)*out/n) })
	}
	wg.Wait()
	return y
}

// attend is causal attention of the L new queries in qkv [L, 3C] over the
// cached keys and values of positions 0 … n+i for query i.
func (c *kvCache) attend(layer int, qkv []float32, L, heads int) *tensor.Tensor {
	C := c.m.Config.NEmbd
	d := C / heads
	scale := float32(1 / math.Sqrt(float64(d)))
	y := tensor.Zeros(1, L, C)
	yd := y.Data()
	K, V := c.k[layer], c.v[layer]
	for i := range L {
		T := c.n + i + 1
		att := c.att[:T]
		for h := range heads {
			q := qkv[i*3*C+h*d : i*3*C+(h+1)*d]
			mx := float32(math.Inf(-1))
			for j := range T {
				a := kernels.Dot(q, K[j*C+h*d:j*C+(h+1)*d]) * scale
				att[j] = a
				mx = max(mx, a)
			}
			var sum float32
			for j := range T {
				e := float32(math.Exp(float64(att[j] - mx)))
				att[j] = e
				sum += e
			}
			out := yd[i*C+h*d : i*C+(h+1)*d]
			for j := range T {
				kernels.Axpy(att[j]/sum, V[j*C+h*d:j*C+(h+1)*d], out)
			}
		}
	}
	return y
}

// sampler turns logits into a token as the options say.
type sampler struct {
	opts  GenerateOptions
	rng   *tensor.RNG
	order []int
	probs []float64
}

func newSampler(opts GenerateOptions, vocab int) *sampler {
	return &sampler{opts: opts, rng: tensor.NewRNG(opts.Seed), order: make([]int, vocab), probs: make([]float64, vocab)}
}

// pick returns the chosen token of logits [vocab].
func (s *sampler) pick(logits []float32) int {
	if s.opts.Temperature == 0 {
		return argmax(logits)
	}
	keep := candidates(logits, s.opts.Temperature, s.opts.TopK, s.opts.TopP, s.order, s.probs)
	u := float64(s.rng.Uint64()>>11) / (1 << 53) // uniform in [0, 1)
	for i, id := range keep {
		if u -= s.probs[i]; u < 0 {
			return id
		}
	}
	return keep[len(keep)-1] // rounding left u ≥ 0
}

// argmax returns the index of the largest value, the first of ties.
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// candidates returns the ids sampling may pick, most likely first, and
// leaves their probabilities (summing to 1) in probs[:len(ids)]: the
// softmax of logits/temperature over the topK largest (all for 0), then
// the smallest prefix whose probability reaches topP (all for 0 or 1),
// renormalised. order and probs are scratch of len(logits).
func candidates(logits []float32, temperature float64, topK int, topP float64, order []int, probs []float64) []int {
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
	keep := order
	if topK > 0 && topK < len(keep) {
		keep = keep[:topK]
	}
	mx := float64(logits[keep[0]]) / temperature
	var sum float64
	for i, id := range keep {
		p := math.Exp(float64(logits[id])/temperature - mx)
		probs[i] = p
		sum += p
	}
	for i := range keep {
		probs[i] /= sum
	}
	if topP > 0 && topP < 1 {
		// Keep a token while the tokens before it hold less than topP.
		var cum float64
		n := 0
		for n < len(keep) && cum < topP {
			cum += probs[n]
			n++
		}
		keep = keep[:n]
		for i := range keep {
			probs[i] /= cum
		}
	}
	return keep
}
