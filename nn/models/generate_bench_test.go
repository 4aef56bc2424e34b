package models

import (
	"context"
	"testing"

	"github.com/gotrain/gotrain/nn"
)

// BenchmarkGenerate times greedy generation with the key-value cache and
// without it (every token recomputing the whole context, as nanoGPT's
// generate) on random weights, and reports tokens/s: the default GPT
// gotrain trains, and GPT-2's 124M shape. One operation is newTokens
// tokens after a 16-token prompt.
//
//	go test ./nn/models -run '^$' -bench BenchmarkGenerate -benchtime 3x
func BenchmarkGenerate(b *testing.B) {
	for _, size := range []struct {
		name      string
		cfg       GPTConfig
		newTokens int
	}{
		{"default", DefaultGPTConfig(), 96},
		{"gpt2-124M", GPTConfig{VocabSize: 50257, BlockSize: 1024, NLayer: 12, NHead: 12, NEmbd: 768, Bias: true}, 64},
	} {
		b.Run(size.name, func(b *testing.B) {
			nn.SetSeed(1)
			m := GPT(size.cfg)
			prompt := make([]int, 16)
			for i := range prompt {
				prompt[i] = (i * 37) % size.cfg.VocabSize
			}
			for _, cache := range []struct {
				name    string
				noCache bool
			}{{"cache", false}, {"no-cache", true}} {
				b.Run(cache.name, func(b *testing.B) {
					opts := GenerateOptions{MaxNewTokens: size.newTokens, NoCache: cache.noCache}
					for b.Loop() {
						if _, err := Generate(context.Background(), m, prompt, opts); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*size.newTokens)/b.Elapsed().Seconds(), "tokens/s")
				})
			}
		})
	}
}
