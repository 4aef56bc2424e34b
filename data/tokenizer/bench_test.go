package tokenizer

import (
	"testing"

	"github.com/gotrain/gotrain/datasets/gotext"
)

// BenchmarkEncode encodes the shipped Go corpus (about 340 KB) with each
// built-in encoding, on one goroutine and across GOMAXPROCS; the piece
// cache is warm after the first iteration, as when encoding a data set.
func BenchmarkEncode(b *testing.B) {
	text := gotext.Corpus()
	for _, name := range []string{"gpt2", "cl100k_base", "o200k_base"} {
		enc, err := Builtin(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				enc.Encode(text)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				enc.EncodeParallel(text, 0)
			}
		})
		b.Run(name+"/cold", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				enc.ResetCache()
				enc.Encode(text)
			}
		})
	}
}

// BenchmarkTrain trains a 2,000-id tokenizer on the Go corpus.
func BenchmarkTrain(b *testing.B) {
	text := gotext.Corpus()
	for b.Loop() {
		if _, err := Train(b.Context(), func(yield func(string) bool) { yield(text) }, 2000, nil); err != nil {
			b.Fatal(err)
		}
	}
}
