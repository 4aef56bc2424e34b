package models

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

func loadHFFixtureModel(t *testing.T) *GPTModel {
	t.Helper()
	m, _, err := LoadHFGPT2(filepath.Join("testdata", "hf_gpt2"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGenerateGreedyMatchesHF compares greedy decoding, with the cache and
// without, with transformers' model.generate(do_sample=False).
func TestGenerateGreedyMatchesHF(t *testing.T) {
	fx := readHFFixture(t)
	m := loadHFFixtureModel(t)
	for _, noCache := range []bool{false, true} {
		got, err := Generate(context.Background(), m, fx.Prompt, GenerateOptions{MaxNewTokens: len(fx.Greedy), NoCache: noCache})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, fx.Greedy) {
			t.Fatalf("no cache %v: greedy tokens\n%v\nwant (transformers)\n%v", noCache, got, fx.Greedy)
		}
	}
}

// TestKVCacheMatchesFullForward runs a sequence longer than the block
// through the cache as Generate does and checks each step's logits against
// the full forward pass of the cropped window, and that greedy decoding
// equals the argmax sequence of full forward passes. The lm_head is large
// enough (1100×64) for matVec to split its rows among the CPUs.
func TestKVCacheMatchesFullForward(t *testing.T) {
	nn.SetSeed(5)
	const V = 1100
	m := GPT(GPTConfig{VocabSize: V, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 64, Bias: true})
	rng := tensor.NewRNG(9)
	for _, p := range nn.Parameters(m) {
		rng.FillNormal(p, 0, 0.3) // logits far apart, so argmax is stable
	}
	nn.SetTrain(m, false)
	seq := []int{3, 914, 15}
	c := newKVCache(m)
	tensor.NoGrad(func() {
		for step := range 20 {
			window := seq[max(0, len(seq)-8):]
			ran := c.ran
			cached := c.next(seq)
			// The prompt, then one position per token until the window
			// slides, then the whole window.
			want := 1
			if step == 0 || len(seq) > 8 {
				want = len(window)
			}
			if c.ran-ran != want {
				t.Fatalf("step %d: %d positions run for a sequence of %d, want %d", step, c.ran-ran, len(seq), want)
			}
			if want := min(len(seq), 8); c.n != want {
				t.Fatalf("step %d: the cache holds %d positions after a sequence of %d, want %d", step, c.n, len(seq), want)
			}
			full := m.Logits(window, 1, len(window)).Data()[(len(window)-1)*V:]
			for i := range full {
				if d := math.Abs(float64(cached[i] - full[i])); d > 1e-4*(1+math.Abs(float64(full[i]))) {
					t.Fatalf("step %d (window %d, cache %d): logit %d = %v, full forward %v", step, len(window), c.n, i, cached[i], full[i])
				}
			}
			seq = append(seq, argmax(full))
		}
	})
	got, err := Generate(context.Background(), m, seq[:3], GenerateOptions{MaxNewTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, seq[3:]) {
		t.Fatalf("greedy with the cache %v, full-forward argmax %v", got, seq[3:])
	}
}

func TestCandidatesTopKTopP(t *testing.T) {
	probs := []float64{0.05, 0.5, 0.1, 0.2, 0.15} // ids by probability: 1, 3, 4, 2, 0
	logits := make([]float32, len(probs))
	for i, p := range probs {
		logits[i] = float32(math.Log(p)) + 3 // softmax ignores the shift
	}
	for _, tc := range []struct {
		name  string
		temp  float64
		topK  int
		topP  float64
		ids   []int
		probs []float64
	}{
		{"all", 1, 0, 0, []int{1, 3, 4, 2, 0}, []float64{0.5, 0.2, 0.15, 0.1, 0.05}},
		{"top-p-1", 1, 0, 1, []int{1, 3, 4, 2, 0}, []float64{0.5, 0.2, 0.15, 0.1, 0.05}},
		{"top-k-2", 1, 2, 0, []int{1, 3}, []float64{0.5 / 0.7, 0.2 / 0.7}},
		{"top-p-0.45", 1, 0, 0.45, []int{1}, []float64{1}},
		{"top-p-0.6", 1, 0, 0.6, []int{1, 3}, []float64{0.5 / 0.7, 0.2 / 0.7}},
		{"top-p-0.9", 1, 0, 0.9, []int{1, 3, 4, 2}, []float64{0.5 / 0.95, 0.2 / 0.95, 0.15 / 0.95, 0.1 / 0.95}},
		{"top-p-tiny", 1, 0, 1e-9, []int{1}, []float64{1}},
		// Top-p over the top-k renormalised: 0.5/0.85 < 0.65 ≤ 0.7/0.85.
		{"top-k-3-top-p-0.65", 1, 3, 0.65, []int{1, 3}, []float64{0.5 / 0.7, 0.2 / 0.7}},
		// Temperature 2: probabilities ∝ √p.
		{"temperature-2-top-k-2", 2, 2, 0, []int{1, 3}, []float64{math.Sqrt(0.5) / (math.Sqrt(0.5) + math.Sqrt(0.2)), math.Sqrt(0.2) / (math.Sqrt(0.5) + math.Sqrt(0.2))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			order, scratch := make([]int, 5), make([]float64, 5)
			ids := candidates(logits, tc.temp, tc.topK, tc.topP, order, scratch)
			if !slices.Equal(ids, tc.ids) {
				t.Fatalf("kept %v, want %v", ids, tc.ids)
			}
			for i, p := range tc.probs {
				if math.Abs(scratch[i]-p) > 1e-6 {
					t.Fatalf("probabilities %v, want %v", scratch[:len(ids)], tc.probs)
				}
			}
		})
	}
	// Exact probabilities at the boundary: four equal logits hold 0.25
	// each, and top-p 0.5 keeps two, as transformers' TopPLogitsWarper
	// (which drops the tokens whose ascending cumulative sum is ≤ 1−p).
	order, scratch := make([]int, 4), make([]float64, 4)
	if ids := candidates([]float32{2, 2, 2, 2}, 1, 0, 0.5, order, scratch); !slices.Equal(ids, []int{0, 1}) || scratch[0] != 0.5 {
		t.Fatalf("four equal logits, top-p 0.5: kept %v with probabilities %v, want [0 1] of 0.5 each", ids, scratch[:len(ids)])
	}
}

func TestGenerateSampling(t *testing.T) {
	m := loadHFFixtureModel(t)
	fx := readHFFixture(t)
	ctx := context.Background()
	gen := func(o GenerateOptions) []int {
		t.Helper()
		o.MaxNewTokens = 30
		out, err := Generate(ctx, m, fx.Prompt, o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b, c := gen(GenerateOptions{Temperature: 1.5, Seed: 1}), gen(GenerateOptions{Temperature: 1.5, Seed: 1}), gen(GenerateOptions{Temperature: 1.5, Seed: 2})
	if !slices.Equal(a, b) {
		t.Fatalf("seed 1 twice: %v and %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("seeds 1 and 2 both gave %v", a)
	}
	if nc := gen(GenerateOptions{Temperature: 1.5, Seed: 1, NoCache: true}); !slices.Equal(nc, a) {
		t.Fatalf("seed 1 without the cache %v, with %v", nc, a)
	}
	// One candidate left is greedy decoding, whatever the temperature.
	greedy := fx.Greedy[:30]
	for _, o := range []GenerateOptions{{Temperature: 5, TopK: 1, Seed: 3}, {Temperature: 5, TopP: 1e-9, Seed: 3}} {
		if got := gen(o); !slices.Equal(got, greedy) {
			t.Fatalf("%+v: %v, want the greedy %v", o, got, greedy)
		}
	}
	// Stop ends after the stop token, included.
	if got := gen(GenerateOptions{Stop: []int{greedy[1]}}); !slices.Equal(got, greedy[:2]) {
		t.Fatalf("stop at %d: %v, want %v", greedy[1], got, greedy[:2])
	}
}

func TestGenerateBadInput(t *testing.T) {
	m := GPT(GPTConfig{VocabSize: 10, BlockSize: 4, NLayer: 1, NHead: 1, NEmbd: 4, Bias: true})
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		prompt []int
		opts   GenerateOptions
		want   string
	}{
		{"empty-prompt", nil, GenerateOptions{MaxNewTokens: 1}, "empty prompt"},
		{"id-outside-vocab", []int{1, 10}, GenerateOptions{MaxNewTokens: 1}, "10"},
		{"negative-temperature", []int{1}, GenerateOptions{MaxNewTokens: 1, Temperature: -1}, "temperature -1"},
		{"nan-temperature", []int{1}, GenerateOptions{MaxNewTokens: 1, Temperature: math.NaN()}, "temperature NaN"},
		{"top-p", []int{1}, GenerateOptions{MaxNewTokens: 1, TopP: 1.5}, "top-p 1.5"},
		{"top-k", []int{1}, GenerateOptions{MaxNewTokens: 1, TopK: -2}, "top-k -2"},
		{"max-new-tokens", []int{1}, GenerateOptions{MaxNewTokens: -1}, "max new tokens -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Generate(ctx, m, tc.prompt, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("tokens %v, error %v: want an error saying %q", out, err, tc.want)
			}
		})
	}
	cctx, cancel := context.WithCancel(ctx)
	n := 0
	err := GenerateFunc(cctx, m, []int{1}, GenerateOptions{MaxNewTokens: 100}, func(int) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 3 {
		t.Fatalf("cancelled after 3 tokens: %d tokens, error %v", n, err)
	}
}
