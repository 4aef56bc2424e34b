package tokenizer

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/go_trained from Train")

func trainCorpus(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "train_corpus.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestTrainFixture trains on the corpus that testdata/hf_bpe was trained
// on by Hugging Face's BpeTrainer with the same settings, and checks the
// same vocabulary and merges come out, and that the saved tokenizer.json
// equals the committed one (which the fixture script loads with
// tokenizers.Tokenizer.from_file).
func TestTrainFixture(t *testing.T) {
	corpus := trainCorpus(t)
	b, err := Train(context.Background(), slices.Values(strings.SplitAfter(corpus, "\n")), 500, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	hf, err := LoadHFJSON(filepath.Join("testdata", "hf_bpe", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if b.VocabSize() != hf.VocabSize() {
		t.Fatalf("vocab size %d, HF %d", b.VocabSize(), hf.VocabSize())
	}
	for id := range b.VocabSize() {
		g, _ := b.TokenBytes(id)
		w, _ := hf.TokenBytes(id)
		if string(g) != string(w) {
			t.Errorf("id %d: %q, HF %q", id, g, w)
		}
	}
	if len(b.mergeList) != len(hf.mergeList) {
		t.Fatalf("%d merges, HF %d", len(b.mergeList), len(hf.mergeList))
	}
	for i := range b.mergeList {
		if b.mergeList[i] != hf.mergeList[i] {
			t.Errorf("merge %d: %v, HF %v", i, b.mergeList[i], hf.mergeList[i])
		}
	}

	dir := t.TempDir()
	out := filepath.Join(dir, "tokenizer.json")
	if err := b.SaveJSON(out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "go_trained", "tokenizer.json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("saved tokenizer.json differs from %s (run go test -run TestTrainFixture -update, then gen_fixtures.py)", golden)
	}
	// The saved file loads back to the same encoder.
	back, err := LoadHFJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	text := corpus[:2000]
	if g, w := back.Encode(text), b.Encode(text); !slices.Equal(g, w) {
		t.Errorf("reloaded tokenizer.json encodes differently")
	}
	// And the GPT-2 files too.
	if err := b.SaveGPT2(dir); err != nil {
		t.Fatal(err)
	}
	g2, err := Load(filepath.Join(dir, "vocab.json"))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := g2.Encode(text), b.Encode(text); !slices.Equal(g, w) {
		t.Errorf("reloaded vocab.json+merges.txt encodes differently")
	}
}

func TestTrainCanceledAndProgress(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	corpus := trainCorpus(t)
	if _, err := Train(ctx, slices.Values(strings.SplitAfter(corpus, "\n")), 400, nil); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("canceled Train: %v", err)
	}
	var calls [][2]int
	b, err := TrainWith(t.Context(), slices.Values([]string{corpus}), 300, nil, TrainOptions{
		Pattern:  PatternCL100K,
		Progress: func(m, target int) { calls = append(calls, [2]int{m, target}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 2 || calls[0] != [2]int{0, 44} || calls[len(calls)-1] != [2]int{44, 44} {
		t.Fatalf("progress calls %v", calls)
	}
	// A cl100k-pattern tokenizer saves with a Split pre-tokenizer and loads
	// back the same.
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := b.SaveJSON(p); err != nil {
		t.Fatal(err)
	}
	back, err := LoadHFJSON(p)
	if err != nil {
		t.Fatal(err)
	}
	if back.pattern != PatternCL100K || !slices.Equal(back.Encode(corpus), b.Encode(corpus)) {
		t.Fatal("reloaded cl100k-pattern tokenizer differs")
	}
	if err := b.SaveGPT2(t.TempDir()); err == nil {
		t.Fatal("SaveGPT2 of a cl100k-pattern tokenizer succeeded")
	}
}
