package shards

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gotrain/gotrain/data/tokenizer"
)

// TestPrepareMatchesNanoGPT: prepared with the gpt2 tokenizer, the
// documents of testdata/nanogpt/docs.jsonl give byte for byte the
// train.bin nanoGPT's openwebtext/prepare.py writes with tiktoken
// (testdata/nanogpt/gen_fixture.py).
func TestPrepareMatchesNanoGPT(t *testing.T) {
	tok, err := tokenizer.Load("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "nanogpt", "train.bin"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	idx, _, err := Prepare(context.Background(), out, tok, []string{filepath.Join("testdata", "nanogpt", "docs.jsonl")}, Options{Tokenizer: "gpt2", Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if idx.VocabSize != 50257 || idx.EOT != 50256 || idx.DType != Uint16 || len(idx.Shards) != 1 {
		t.Fatalf("index %+v", idx)
	}
	got, err := os.ReadFile(filepath.Join(out, idx.Shards[0].File))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("train shard of %d bytes differs from nanoGPT's train.bin of %d", len(got), len(want))
	}
}
