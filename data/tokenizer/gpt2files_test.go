package tokenizer

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/datasets/gotext"
)

// splitBelow merges tok's bytes with the ranks below limit only, lowest
// first (how tiktoken relates ranks to GPT-2's merges).
func splitBelow(ids map[string]int, tok []byte, limit int) [][]byte {
	parts := make([][]byte, len(tok))
	for i := range tok {
		parts[i] = tok[i : i+1]
	}
	for {
		best, bi := limit, -1
		for i := 0; i+1 < len(parts); i++ {
			if r, ok := ids[string(slices.Concat(parts[i], parts[i+1]))]; ok && r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			return parts
		}
		parts[bi] = slices.Concat(parts[bi], parts[bi+1])
		parts = slices.Delete(parts, bi+1, bi+2)
	}
}

// TestGPT2FilesFromRanks writes the gpt2 encoding as GPT-2's vocab.json
// and merges.txt (each token of rank r ≥ 256 is the merge of the two parts
// its bytes reach with the ranks below r), loads them back through the
// merge-list path Hugging Face uses, and checks every token is one merge
// and both paths encode the same.
func TestGPT2FilesFromRanks(t *testing.T) {
	g, err := Builtin("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	var vocab, merges strings.Builder
	vocab.WriteString("{")
	merges.WriteString("#version: 0.2\n")
	for id, tok := range g.vocab {
		if id > 0 {
			vocab.WriteString(",")
		}
		vocab.WriteString(jsonString(byteLevelEncode(tok)) + ":" + itoa(id))
		if id < 256 {
			continue
		}
		parts := splitBelow(g.ids, tok, id)
		if len(parts) != 2 {
			t.Fatalf("rank %d %q: %d parts below its rank, want 2", id, tok, len(parts))
		}
		merges.WriteString(byteLevelEncode(parts[0]) + " " + byteLevelEncode(parts[1]) + "\n")
	}
	vocab.WriteString(`,"<|endoftext|>":50256}`)
	dir := t.TempDir()
	writeFile(t, dir, "vocab.json", vocab.String())
	writeFile(t, dir, "merges.txt", merges.String())
	files, err := LoadGPT2(filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if files.VocabSize() != 50257 || files.eot != 50256 {
		t.Fatalf("vocab size %d, EOT %d", files.VocabSize(), files.eot)
	}
	r := rand.New(rand.NewPCG(9, 10))
	texts := []string{gotext.Corpus()[:100000]}
	for range 200 {
		texts = append(texts, randomText(r, 50, true))
	}
	for _, text := range texts {
		if a, b := files.Encode(text), g.Encode(text); !slices.Equal(a, b) {
			t.Fatalf("vocab.json+merges.txt and ranks encode %q differently:\n%v\n%v", text[:min(len(text), 80)], a, b)
		}
	}
	// The byte-level map of the first ids is GPT-2's: printable ASCII first.
	if tok, _ := g.TokenBytes(0); string(tok) != "!" {
		t.Fatalf("id 0 is %q, want !", tok)
	}
}
