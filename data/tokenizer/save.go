package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// patternRegex is the regular expression of each pattern, as written in
// tokenizer.json.
var patternRegex = map[Pattern]string{PatternGPT2: patGPT2, PatternCL100K: patCL100K, PatternO200K: patO200K}

// orderedSpecials returns the special tokens in saving order: as given to
// Train, else by id.
func (b *BPE) orderedSpecials() []string {
	if len(b.specialOrder) == len(b.specials) {
		return b.specialOrder
	}
	s := b.SpecialTokens()
	slices.SortFunc(s, func(x, y string) int { return b.specials[x] - b.specials[y] })
	return s
}

func (b *BPE) canSave() error {
	if b.mergeList == nil {
		return fmt.Errorf("tokenizer %s: has ranks, not a merge list, and cannot be saved as a Hugging Face or GPT-2 file", b.name)
	}
	if b.addPrefixSpace && b.pattern != PatternGPT2 {
		return fmt.Errorf("tokenizer %s: cannot save add_prefix_space with a Split pre-tokenizer", b.name)
	}
	return nil
}

// writeVocab writes the vocabulary as a JSON object, printable token → id,
// in id order; special tokens are included with their text.
func (b *BPE) writeVocab(buf *bytes.Buffer, specials bool) {
	enc := func(v any) {
		data, _ := json.Marshal(v)
		buf.Write(data)
	}
	spByID := map[int]string{}
	if specials {
		for s, id := range b.specials {
			spByID[id] = s
		}
	}
	buf.WriteByte('{')
	first := true
	for id := 0; id < b.VocabSize(); id++ {
		var key string
		if s, ok := spByID[id]; ok {
			key = s
		} else if id < len(b.vocab) && b.vocab[id] != nil {
			key = byteLevelEncode(b.vocab[id])
		} else {
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		enc(key)
		buf.WriteByte(':')
		enc(id)
	}
	buf.WriteByte('}')
}

// SaveJSON writes the tokenizer as a Hugging Face tokenizer.json (model
// BPE, ByteLevel pre-tokenizer and decoder; special tokens as added
// tokens), which tokenizers.Tokenizer.from_file loads and encodes the same.
func (b *BPE) SaveJSON(path string) error {
	if err := b.canSave(); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := func(v any) {
		data, _ := json.Marshal(v)
		buf.Write(data)
	}
	buf.WriteString(`{"version":"1.0","truncation":null,"padding":null,"added_tokens":[`)
	for i, s := range b.orderedSpecials() {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"id":%d,"content":`, b.specials[s])
		enc(s)
		buf.WriteString(`,"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}`)
	}
	buf.WriteString(`],"normalizer":null,"pre_tokenizer":`)
	if b.pattern == PatternGPT2 {
		fmt.Fprintf(&buf, `{"type":"ByteLevel","add_prefix_space":%v,"trim_offsets":true,"use_regex":true}`, b.addPrefixSpace)
	} else {
		buf.WriteString(`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":`)
		enc(patternRegex[b.pattern])
		buf.WriteString(`},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`)
	}
	buf.WriteString(`,"post_processor":null,"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},`)
	fmt.Fprintf(&buf, `"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":%v,"vocab":`, b.wholeFirst)
	b.writeVocab(&buf, true)
	buf.WriteString(`,"merges":[`)
	for i, m := range b.mergeList {
		if i > 0 {
			buf.WriteByte(',')
		}
		enc([2]string{byteLevelEncode(b.vocab[m[0]]), byteLevelEncode(b.vocab[m[1]])})
	}
	buf.WriteString("]}}\n")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	return nil
}

// SaveGPT2 writes the tokenizer as GPT-2's vocab.json and merges.txt in
// dir. The files have no place for special tokens other than
// <|endoftext|> (kept in vocab.json) or for a pre-tokenizer other than
// GPT-2's.
func (b *BPE) SaveGPT2(dir string) error {
	if err := b.canSave(); err != nil {
		return err
	}
	if b.pattern != PatternGPT2 || b.addPrefixSpace {
		return fmt.Errorf("tokenizer %s: vocab.json+merges.txt imply GPT-2's pre-tokenizer; save as tokenizer.json", b.name)
	}
	for s := range b.specials {
		if s != "<|endoftext|>" {
			return fmt.Errorf("tokenizer %s: vocab.json+merges.txt cannot hold special token %q; save as tokenizer.json", b.name, s)
		}
	}
	var vocab bytes.Buffer
	b.writeVocab(&vocab, true)
	vocab.WriteByte('\n')
	var merges bytes.Buffer
	merges.WriteString("#version: 0.2\n")
	for _, m := range b.mergeList {
		fmt.Fprintf(&merges, "%s %s\n", byteLevelEncode(b.vocab[m[0]]), byteLevelEncode(b.vocab[m[1]]))
	}
	if err := os.WriteFile(filepath.Join(dir, "vocab.json"), vocab.Bytes(), 0o644); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "merges.txt"), merges.Bytes(), 0o644); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	return nil
}
