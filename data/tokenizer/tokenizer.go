// Package tokenizer turns text into token ids and back with byte-level BPE
// tokenizers that give the same ids as tiktoken and Hugging Face
// tokenizers.
//
// Load opens a tokenizer by name or file: the built-in encodings gpt2,
// r50k_base, cl100k_base and o200k_base (OpenAI's rank data, shipped in
// the binary), a Hugging Face tokenizer.json (model BPE with a ByteLevel
// pre-tokenizer, or a Split with GPT-2's, cl100k's or o200k's pattern),
// a tiktoken rank file, or GPT-2's vocab.json and merges.txt. Train learns
// a new one as Hugging Face's BpeTrainer does; SaveJSON and SaveGPT2 write
// it in those formats.
//
// The pre-tokenizers are written by hand (Go's regexp has no lookahead)
// and split exactly as the regular expressions do. Text that is not valid
// UTF-8 is encoded too: each invalid byte splits like U+FFFD and is kept
// as its byte, so Decode returns the input unchanged. (tiktoken and
// tokenizers take Python strings, which cannot hold invalid UTF-8.)
//
// Encode treats special-token text as ordinary text; EncodeWithSpecial
// turns the allowed special tokens into their ids, which is what Hugging
// Face's encode does with all added tokens. A tokenizer.json's normalizer
// must be empty and its post-processor is not applied (no BOS/EOS added).
package tokenizer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Tokenizer turns text into token ids and back.
type Tokenizer interface {
	// VocabSize is the number of ids, including special tokens.
	VocabSize() int
	// Encode encodes ordinary text: special-token text is encoded as plain
	// text (tiktoken's encode_ordinary). It is safe for concurrent use.
	Encode(text string) []int
	// Decode returns the text of ids, or an error naming the first id
	// outside the vocabulary.
	Decode(ids []int) (string, error)
	// EndOfText returns the document separator (<|endoftext|>) if the
	// tokenizer has one.
	EndOfText() (id int, ok bool)
}

// Load opens the tokenizer spec names: "bytes" (256 byte ids, no EOT), a
// built-in encoding name ("gpt2", "r50k_base", "cl100k_base", "o200k_base"),
// a Hugging Face tokenizer.json, a tiktoken rank file (*.tiktoken), a GPT-2
// vocab.json (merges.txt beside it) or a directory holding vocab.json and
// merges.txt or tokenizer.json.
func Load(spec string) (Tokenizer, error) {
	if spec == "" {
		return nil, fmt.Errorf("tokenizer: empty tokenizer spec")
	}
	if spec == "bytes" {
		return Bytes{}, nil
	}
	if isBuiltin(spec) {
		return loadBuiltin(spec)
	}
	st, err := os.Stat(spec)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("tokenizer %s: not a built-in encoding (bytes, %s) and not a file: %w", spec, strings.Join(BuiltinNames(), ", "), err)
	}
	if st.IsDir() {
		tj := filepath.Join(spec, "tokenizer.json")
		if _, err := os.Stat(tj); err == nil {
			return asTokenizer(LoadHFJSON(tj))
		}
		vj := filepath.Join(spec, "vocab.json")
		if _, err := os.Stat(vj); err == nil {
			return asTokenizer(LoadGPT2(vj, filepath.Join(spec, "merges.txt")))
		}
		return nil, fmt.Errorf("tokenizer %s: directory holds neither tokenizer.json nor vocab.json+merges.txt", spec)
	}
	base := filepath.Base(spec)
	switch {
	case strings.HasSuffix(base, ".tiktoken"):
		return asTokenizer(LoadTiktoken(spec, ""))
	case base == "vocab.json" || strings.HasSuffix(base, "-vocab.json"):
		merges := filepath.Join(filepath.Dir(spec), strings.TrimSuffix(base, "vocab.json")+"merges.txt")
		return asTokenizer(LoadGPT2(spec, merges))
	case strings.HasSuffix(base, ".json"):
		return asTokenizer(LoadHFJSON(spec))
	}
	return nil, fmt.Errorf("tokenizer %s: unknown file kind (want tokenizer.json, vocab.json, *.tiktoken or a directory)", spec)
}

// Bytes is the byte tokenizer: every byte is its own id (0..255), no EOT.
type Bytes struct{}

// VocabSize returns 256.
func (Bytes) VocabSize() int { return 256 }

// Encode returns the bytes of text as ids.
func (Bytes) Encode(text string) []int {
	ids := make([]int, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = int(text[i])
	}
	return ids
}

// Decode returns the bytes ids as text.
func (Bytes) Decode(ids []int) (string, error) {
	b := make([]byte, len(ids))
	for i, id := range ids {
		if id < 0 || id > 255 {
			return "", fmt.Errorf("tokenizer bytes: id %d at position %d outside the vocabulary [0,256)", id, i)
		}
		b[i] = byte(id)
	}
	return string(b), nil
}

// EndOfText reports that the byte tokenizer has no document separator.
func (Bytes) EndOfText() (int, bool) { return 0, false }

// asTokenizer keeps a nil *BPE from becoming a non-nil Tokenizer.
func asTokenizer(b *BPE, err error) (Tokenizer, error) {
	if err != nil {
		return nil, err
	}
	return b, nil
}
