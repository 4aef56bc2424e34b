package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type fixtureCase struct {
	Text       string `json:"text"`
	IDs        []int  `json:"ids"`
	SpecialIDs []int  `json:"special_ids"`
}

func readFixtures(t *testing.T, file string) map[string][]fixtureCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases map[string][]fixtureCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s: no cases", file)
	}
	return f.Cases
}

// TestTiktokenFixtures checks the built-in encodings against tiktoken's
// encode_ordinary and encode(allowed_special="all").
func TestTiktokenFixtures(t *testing.T) {
	for name, cases := range readFixtures(t, "tiktoken_fixtures.json") {
		t.Run(name, func(t *testing.T) {
			b, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			checkCases(t, b, cases, b.SpecialTokens())
		})
	}
}

// TestHFFixtures checks tokenizer.json, vocab.json+merges.txt and Split
// pre-tokenizer files against Hugging Face tokenizers' encode.
func TestHFFixtures(t *testing.T) {
	cases := readFixtures(t, "hf_fixtures.json")
	files := map[string]string{
		"hf_bpe/tokenizer.json": "hf_bpe/tokenizer.json",
		"hf_bpe/vocab.json":     "hf_bpe/tokenizer.json", // same model, GPT-2 files
		"hf_bpe":                "hf_bpe/tokenizer.json", // directory
		"hf_split_cl100k.json":  "hf_split_cl100k.json",
		"hf_split_o200k.json":   "hf_split_o200k.json",
		"hf_prefix_space.json":  "hf_prefix_space.json",
	}
	if _, ok := cases["go_trained/tokenizer.json"]; ok {
		files["go_trained/tokenizer.json"] = "go_trained/tokenizer.json"
	}
	for file, key := range files {
		t.Run(file, func(t *testing.T) {
			tk, err := Load(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			b := tk.(*BPE)
			cs := cases[key]
			if len(cs) == 0 {
				t.Fatalf("no cases for %s", key)
			}
			checkCases(t, b, cs, b.SpecialTokens())
		})
	}
}

func checkCases(t *testing.T, b *BPE, cases []fixtureCase, specials []string) {
	t.Helper()
	for _, c := range cases {
		if c.IDs != nil || c.SpecialIDs == nil {
			if got := b.Encode(c.Text); !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
				t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
			}
		}
		want := c.SpecialIDs
		if want == nil {
			want = c.IDs
		}
		got := b.EncodeWithSpecial(c.Text, specials)
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("EncodeWithSpecial(%q)\n got %v\nwant %v", c.Text, got, want)
		}
		if b.addPrefixSpace {
			continue // decoding keeps the added space
		}
		if dec, err := b.Decode(got); err != nil || dec != c.Text {
			t.Errorf("Decode(Encode(%q)) = %q, %v", c.Text, dec, err)
		}
	}
}
