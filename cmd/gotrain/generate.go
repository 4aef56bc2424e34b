package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/data/tokenizer"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
)

// generateFlags are the flags of `gotrain generate`.
type generateFlags struct {
	checkpoint, tokenizer, prompt, randomInit string
	maxNewTokens, topK, nHead                 int
	temperature, topP                         float64
	seed                                      uint64
	stopAtEOT, noCache                        bool
}

// randomShapes are the model shapes --random-init builds: GPT-2's four
// published sizes.
var randomShapes = map[string]models.GPTConfig{
	"gpt2":        {VocabSize: 50257, BlockSize: 1024, NLayer: 12, NHead: 12, NEmbd: 768, Bias: true},
	"gpt2-medium": {VocabSize: 50257, BlockSize: 1024, NLayer: 24, NHead: 16, NEmbd: 1024, Bias: true},
	"gpt2-large":  {VocabSize: 50257, BlockSize: 1024, NLayer: 36, NHead: 20, NEmbd: 1280, Bias: true},
	"gpt2-xl":     {VocabSize: 50257, BlockSize: 1024, NLayer: 48, NHead: 25, NEmbd: 1600, Bias: true},
}

// newGenerateCmd is `gotrain generate --checkpoint F --prompt TEXT`.
func newGenerateCmd() *cobra.Command {
	var f generateFlags
	cmd := &cobra.Command{
		Use:   "generate --checkpoint FILE --prompt TEXT",
		Short: "Generate text with a GPT: a gotrain checkpoint, nanoGPT or Hugging Face GPT-2 weights",
		Long: `Continue a prompt with a GPT and print the text as it is generated: the
prompt, then each new token. At the end a line on stderr gives the tokens
and tokens/s.

--checkpoint is a safetensors file (or a directory holding
model.safetensors) of either naming:
  - nanoGPT's, as gotrain train gpt --save writes it (or nanoGPT's
    state_dict): the sizes come from the weights, the heads from --n-head
    (default 4, gotrain train gpt's);
  - Hugging Face GPT-2's (with or without the "transformer." prefix), with
    its config.json beside it (without one: n_embd/64 heads).
--random-init gpt2|gpt2-medium|gpt2-large|gpt2-xl instead builds that shape
with random weights, to measure tokens/s.

--tokenizer is "bytes", a built-in encoding (gpt2, r50k_base, cl100k_base,
o200k_base), a tokenizer.json, a *.tiktoken file or a directory holding
vocab.json and merges.txt; by default gpt2 for Hugging Face weights and
--random-init, bytes for nanoGPT-named weights (gotrain's byte-level GPT).
Its vocabulary must be the model's size. An empty prompt starts from the
tokenizer's end-of-text token.

Each token is sampled from the softmax of the logits divided by
--temperature (0: the most likely token), restricted to the --top-k most
likely and to the smallest set of them holding --top-p of the probability.
Each token costs one position's forward pass (the layers' keys and values
are kept); past the model's context length the window slides and is
recomputed for every token.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef("generate: unexpected argument %q (the prompt is --prompt)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			return runGenerate(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.checkpoint, "checkpoint", "", "the model's weights: a safetensors file (nanoGPT or Hugging Face GPT-2 names) or a directory holding model.safetensors")
	fl.StringVar(&f.randomInit, "random-init", "", "instead of --checkpoint, random weights of a GPT-2 shape: gpt2, gpt2-medium, gpt2-large or gpt2-xl")
	fl.StringVar(&f.tokenizer, "tokenizer", "", "bytes, gpt2, r50k_base, cl100k_base, o200k_base, a tokenizer.json, a *.tiktoken file or a vocab.json directory (default: gpt2 for GPT-2 weights, bytes for nanoGPT names)")
	fl.StringVar(&f.prompt, "prompt", "", "the text to continue (empty: start from the end-of-text token)")
	fl.IntVar(&f.maxNewTokens, "max-new-tokens", 200, "tokens to generate")
	fl.Float64Var(&f.temperature, "temperature", 0.8, "sampling temperature (0 for the most likely token)")
	fl.IntVar(&f.topK, "top-k", 200, "sample among the k most likely tokens (0 for all)")
	fl.Float64Var(&f.topP, "top-p", 1, "sample among the most likely tokens holding this much probability (1 for all)")
	fl.Uint64Var(&f.seed, "seed", 1, "random seed of the sampling")
	fl.IntVar(&f.nHead, "n-head", 0, "attention heads of nanoGPT-named weights (default 4, as gotrain train gpt)")
	fl.BoolVar(&f.stopAtEOT, "stop-at-eot", true, "stop at the tokenizer's end-of-text token")
	fl.BoolVar(&f.noCache, "no-cache", false, "recompute the whole context for every token (no key-value cache), to compare speed")
	return cmd
}

// check refuses flag values that cannot work, naming the flag.
func (f *generateFlags) check() error {
	switch {
	case f.checkpoint == "" && f.randomInit == "":
		return flagNeeds("checkpoint", "the model's weights are required (or --random-init SHAPE)")
	case f.checkpoint != "" && f.randomInit != "":
		return flagNeeds("random-init", "builds random weights: give it or --checkpoint, not both")
	case f.maxNewTokens < 1:
		return badFlag("max-new-tokens", f.maxNewTokens, "must be at least 1")
	case !(f.temperature >= 0) || math.IsInf(f.temperature, 0):
		return badFlag("temperature", f.temperature, "must be a finite number >= 0")
	case f.topK < 0:
		return badFlag("top-k", f.topK, "must be at least 0 (0 for all tokens)")
	case !(f.topP > 0 && f.topP <= 1):
		return badFlag("top-p", f.topP, "must be in (0, 1]")
	case f.nHead < 0:
		return badFlag("n-head", f.nHead, "must be at least 1")
	case f.nHead != 0 && f.randomInit != "":
		return flagNeeds("n-head", "is for nanoGPT-named --checkpoint weights; --random-init shapes have their own")
	}
	if _, ok := randomShapes[f.randomInit]; f.randomInit != "" && !ok {
		return badFlag("random-init", f.randomInit, "must be gpt2, gpt2-medium, gpt2-large or gpt2-xl")
	}
	return nil
}

// loadGenerateModel returns the model the flags name, whether it has
// GPT-2's naming (and so GPT-2's tokenizer by default), and a description.
func loadGenerateModel(f generateFlags) (*models.GPTModel, bool, string, error) {
	if f.randomInit != "" {
		cfg := randomShapes[f.randomInit]
		m := models.GPT(cfg)
		for _, b := range m.Blocks {
			b.MLP.GELU.Tanh = true // GPT-2's gelu_new
		}
		return m, true, f.randomInit + " shape, random weights", nil
	}
	if _, err := os.Stat(f.checkpoint); err != nil {
		return nil, false, "", usagef("--checkpoint %s: %v", showValue(f.checkpoint), errors.Unwrap(err))
	}
	m, _, hf, err := models.LoadGPTWeights(f.checkpoint, f.nHead)
	if err != nil {
		return nil, false, "", fmt.Errorf("generate: %w", err)
	}
	kind := "nanoGPT names"
	if hf {
		kind = "Hugging Face GPT-2"
	}
	return m, hf, f.checkpoint + " (" + kind + ")", nil
}

// runGenerate loads the model and tokenizer, streams the prompt and the
// generated text to stdout and the speed to stderr.
func runGenerate(ctx context.Context, f generateFlags, stdout, stderr io.Writer) error {
	m, gpt2, desc, err := loadGenerateModel(f)
	if err != nil {
		return err
	}
	spec := f.tokenizer
	if spec == "" {
		spec = "bytes"
		if gpt2 {
			spec = "gpt2"
		}
	}
	tok, err := tokenizer.Load(spec)
	if err != nil {
		return usagef("--tokenizer %s: %v", showValue(spec), err)
	}
	cfg := m.Config
	if tok.VocabSize() != cfg.VocabSize {
		return usagef("--tokenizer %s: its vocabulary has %d tokens, the model's %d", showValue(spec), tok.VocabSize(), cfg.VocabSize)
	}
	prompt := tok.Encode(f.prompt)
	eot, hasEOT := tok.EndOfText()
	if len(prompt) == 0 {
		if !hasEOT {
			return usagef("--prompt: empty, and tokenizer %s has no end-of-text token to start from", spec)
		}
		prompt = []int{eot}
	}
	fmt.Fprintf(stderr, "model: %s: n_layer=%d n_head=%d n_embd=%d block_size=%d vocab_size=%d, %d parameters; prompt: %d tokens\n",
		desc, cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.VocabSize, nn.NumParameters(m), len(prompt))
	opts := models.GenerateOptions{MaxNewTokens: f.maxNewTokens, Temperature: f.temperature, TopK: f.topK,
		Seed: f.seed, NoCache: f.noCache}
	if f.topP < 1 {
		opts.TopP = f.topP
	}
	if f.stopAtEOT && hasEOT {
		opts.Stop = []int{eot}
	}
	out := bufio.NewWriter(stdout)
	w := &textStream{tok: tok, out: out}
	if _, err := io.WriteString(out, f.prompt); err != nil {
		return err
	}
	start := time.Now()
	n := 0
	err = models.GenerateFunc(ctx, m, prompt, opts, func(id int) error {
		n++
		if hasEOT && id == eot && f.stopAtEOT {
			return nil
		}
		return w.add(id)
	})
	elapsed := time.Since(start)
	if ferr := w.flush(); err == nil {
		err = ferr
	}
	if err == nil {
		_, err = io.WriteString(out, "\n")
	}
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("generate: after %d tokens: %w", n, err)
	}
	fmt.Fprintf(stderr, "generated %d tokens in %.2fs: %.1f tokens/s\n", n, elapsed.Seconds(), float64(n)/elapsed.Seconds())
	return nil
}

// textStream writes the text of tokens as they come. A token may end
// inside a UTF-8 character (byte-level tokens split them): its bytes wait
// for the tokens that complete it, for at most maxPending tokens.
type textStream struct {
	tok     tokenizer.Tokenizer
	out     *bufio.Writer
	pending []int
}

// maxPending bounds how many tokens textStream holds back for an
// incomplete character: a UTF-8 character has at most 4 bytes.
const maxPending = 4

func (s *textStream) add(id int) error {
	s.pending = append(s.pending, id)
	text, err := s.tok.Decode(s.pending)
	if err != nil {
		return err
	}
	if len(s.pending) < maxPending && incompleteUTF8(text) {
		return nil
	}
	s.pending = s.pending[:0]
	if _, err := s.out.WriteString(text); err != nil {
		return err
	}
	return s.out.Flush() // the user watches the text appear
}

func (s *textStream) flush() error {
	if len(s.pending) == 0 {
		return nil
	}
	text, err := s.tok.Decode(s.pending)
	s.pending = slices.Delete(s.pending, 0, len(s.pending))
	if err != nil {
		return err
	}
	_, err = s.out.WriteString(text)
	return err
}

// incompleteUTF8 reports whether s ends in the first bytes of a UTF-8
// character.
func incompleteUTF8(s string) bool {
	for i := 1; i <= 3 && i <= len(s); i++ {
		c := s[len(s)-i]
		if utf8.RuneStart(c) {
			return !utf8.FullRuneInString(s[len(s)-i:])
		}
	}
	return false
}
