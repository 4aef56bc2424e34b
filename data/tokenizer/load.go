package tokenizer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The built-in encodings' ranks: for each rank from 0, a uvarint length
// and the token's bytes (see encodings/LICENSE).
//
//go:embed encodings/*.bpe.gz
var encodingFS embed.FS

type builtin struct {
	file     string
	pattern  Pattern
	specials map[string]int
}

var builtins = map[string]builtin{
	"gpt2":      {"r50k_base", PatternGPT2, map[string]int{"<|endoftext|>": 50256}},
	"r50k_base": {"r50k_base", PatternGPT2, map[string]int{"<|endoftext|>": 50256}},
	"cl100k_base": {"cl100k_base", PatternCL100K, map[string]int{
		"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
		"<|fim_suffix|>": 100260, "<|endofprompt|>": 100276,
	}},
	"o200k_base": {"o200k_base", PatternO200K, map[string]int{"<|endoftext|>": 199999, "<|endofprompt|>": 200018}},
}

var (
	builtinMu    sync.Mutex
	builtinCache = map[string]*BPE{}
)

// BuiltinNames lists the built-in encodings, sorted.
func BuiltinNames() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func isBuiltin(name string) bool {
	_, ok := builtins[name]
	return ok
}

// Builtin returns a built-in encoding ("gpt2", "r50k_base", "cl100k_base",
// "o200k_base"), identical to tiktoken's. Each is loaded once per process.
func Builtin(name string) (*BPE, error) {
	spec, ok := builtins[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer: unknown built-in encoding %q (have %s)", name, strings.Join(BuiltinNames(), ", "))
	}
	builtinMu.Lock()
	defer builtinMu.Unlock()
	if b := builtinCache[name]; b != nil {
		return b, nil
	}
	vocab, err := readEmbedded(spec.file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", name, err)
	}
	b, err := newBPE(name, spec.pattern, vocab, nil, spec.specials)
	if err != nil {
		return nil, err
	}
	builtinCache[name] = b
	return b, nil
}

func loadBuiltin(name string) (Tokenizer, error) { return asTokenizer(Builtin(name)) }

func readEmbedded(file string) ([][]byte, error) {
	f, err := encodingFS.Open("encodings/" + file + ".bpe.gz")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var vocab [][]byte
	for len(raw) > 0 {
		n, k := binary.Uvarint(raw)
		if k <= 0 || uint64(len(raw)-k) < n {
			return nil, fmt.Errorf("corrupt rank data at token %d", len(vocab))
		}
		var tok []byte
		if n > 0 {
			tok = raw[k : k+int(n)]
		}
		vocab = append(vocab, tok)
		raw = raw[k+int(n):]
	}
	return vocab, nil
}

// LoadTiktoken loads a tiktoken rank file: one base64 token and its rank
// per line. pattern names the pre-tokenizer ("gpt2", "cl100k", "o200k"
// or a built-in encoding name); empty takes it from a built-in encoding
// name in the file name (r50k_base.tiktoken …) and is cl100k's otherwise.
// A file named after a built-in encoding gets that encoding's special
// tokens.
func LoadTiktoken(path, pattern string) (*BPE, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	var vocab [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		tokB64, rankS, ok := strings.Cut(text, " ")
		if !ok {
			return nil, fmt.Errorf("tokenizer %s:%d: want \"BASE64 RANK\", got %q", path, line, trunc(text))
		}
		tok, err := base64.StdEncoding.DecodeString(tokB64)
		if err != nil || len(tok) == 0 {
			return nil, fmt.Errorf("tokenizer %s:%d: bad base64 token %q", path, line, trunc(tokB64))
		}
		rank, err := strconv.Atoi(rankS)
		if err != nil || rank < 0 || rank > 1<<24 {
			return nil, fmt.Errorf("tokenizer %s:%d: bad rank %q", path, line, trunc(rankS))
		}
		for len(vocab) <= rank {
			vocab = append(vocab, nil)
		}
		if vocab[rank] != nil {
			return nil, fmt.Errorf("tokenizer %s:%d: rank %d appears twice", path, line, rank)
		}
		vocab[rank] = tok
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	if len(vocab) == 0 {
		return nil, fmt.Errorf("tokenizer %s: no tokens", path)
	}
	p, specials := PatternCL100K, map[string]int(nil)
	base := filepath.Base(path)
	for _, name := range BuiltinNames() {
		if strings.HasPrefix(base, name) {
			p, specials = builtins[name].pattern, builtins[name].specials
		}
	}
	if pattern != "" {
		if p, err = ParsePattern(pattern); err != nil {
			return nil, fmt.Errorf("tokenizer %s: %w", path, err)
		}
	}
	b, err := newBPE(path, p, vocab, nil, nil)
	if err != nil {
		return nil, err
	}
	for s, id := range specials {
		if id < len(vocab) && vocab[id] != nil {
			continue // not this encoding's layout
		}
		if err := b.addSpecial(s, id); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// ParsePattern returns the pre-tokenizer named by name: "gpt2", "cl100k",
// "o200k", a built-in encoding name, or one of their regular expressions.
func ParsePattern(name string) (Pattern, error) {
	switch name {
	case "gpt2", "r50k_base", "p50k_base":
		return PatternGPT2, nil
	case "cl100k", "cl100k_base":
		return PatternCL100K, nil
	case "o200k", "o200k_base":
		return PatternO200K, nil
	}
	if p, ok := patternByRegex[name]; ok {
		return p, nil
	}
	return 0, fmt.Errorf("unsupported pre-tokenizer pattern %q (supported: gpt2, cl100k, o200k and their regular expressions)", trunc(name))
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// LoadGPT2 loads GPT-2's vocab.json (printable token → id) and merges.txt
// (one "left right" pair per line in rank order, after an optional
// "#version" line). <|endoftext|> in vocab.json becomes the special token.
func LoadGPT2(vocabPath, mergesPath string) (*BPE, error) {
	data, err := os.ReadFile(vocabPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var vocabJSON map[string]int
	if err := json.Unmarshal(data, &vocabJSON); err != nil {
		return nil, fmt.Errorf("tokenizer %s: not a vocab.json (token → id object): %w", vocabPath, err)
	}
	mdata, err := os.ReadFile(mergesPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: merges.txt beside it: %w", vocabPath, err)
	}
	var merges [][2]string
	for i, line := range strings.Split(string(mdata), "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || (i == 0 && strings.HasPrefix(line, "#version")) {
			continue
		}
		l, r, ok := strings.Cut(line, " ")
		if !ok || l == "" || r == "" || strings.Contains(r, " ") {
			return nil, fmt.Errorf("tokenizer %s:%d: want \"LEFT RIGHT\", got %q", mergesPath, i+1, trunc(line))
		}
		merges = append(merges, [2]string{l, r})
	}
	specials := map[string]int{}
	if id, ok := vocabJSON["<|endoftext|>"]; ok {
		specials["<|endoftext|>"] = id
		delete(vocabJSON, "<|endoftext|>")
	}
	return buildMerged(vocabPath, mergesPath, PatternGPT2, vocabJSON, merges, specials)
}

// buildMerged builds a BPE from a printable vocabulary and its merges.
func buildMerged(name, mergesName string, p Pattern, vocabJSON map[string]int, merges [][2]string, specials map[string]int) (*BPE, error) {
	n := 0
	for _, id := range vocabJSON {
		if id < 0 || id > 1<<24 {
			return nil, fmt.Errorf("tokenizer %s: id %d out of range", name, id)
		}
		n = max(n, id+1)
	}
	vocab := make([][]byte, n)
	for s, id := range vocabJSON {
		if _, sp := specials[s]; sp {
			continue
		}
		tok, err := byteLevelDecode(s)
		if err != nil {
			return nil, fmt.Errorf("tokenizer %s: %w", name, err)
		}
		if vocab[id] != nil {
			return nil, fmt.Errorf("tokenizer %s: id %d is used twice", name, id)
		}
		vocab[id] = tok
	}
	mm := make(map[uint64]uint64, len(merges))
	list := make([][2]int32, 0, len(merges))
	for rank, m := range merges {
		l, okl := vocabJSON[m[0]]
		r, okr := vocabJSON[m[1]]
		res, okm := vocabJSON[m[0]+m[1]]
		if !okl || !okr || !okm {
			return nil, fmt.Errorf("tokenizer %s: merge %d %q %q: a token is not in the vocabulary", mergesName, rank+1, m[0], m[1])
		}
		key := uint64(uint32(l))<<32 | uint64(uint32(r))
		if _, dup := mm[key]; !dup { // the first (lowest) rank wins
			mm[key] = uint64(rank)<<32 | uint64(uint32(res))
		}
		list = append(list, [2]int32{int32(l), int32(r)})
	}
	b, err := newBPE(name, p, vocab, mm, specials)
	if err != nil {
		return nil, err
	}
	b.mergeList = list
	return b, nil
}

// hfJSON is the part of a Hugging Face tokenizer.json this package reads.
type hfJSON struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         hfModel         `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
}

type hfModel struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   json.RawMessage   `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

type hfPreTok struct {
	Type           string     `json:"type"`
	AddPrefixSpace bool       `json:"add_prefix_space"`
	UseRegex       *bool      `json:"use_regex"`
	Pretokenizers  []hfPreTok `json:"pretokenizers"`
	Pattern        struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
}

// LoadHFJSON loads a Hugging Face tokenizer.json of a byte-level BPE: model
// type BPE with a ByteLevel pre-tokenizer, or a Split pre-tokenizer with
// GPT-2's, cl100k's or o200k's pattern followed by ByteLevel without
// regex. Added tokens become special tokens. The post-processor is not
// applied (Encode adds no BOS/EOS).
func LoadHFJSON(path string) (*BPE, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var tj hfJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer %s: not a tokenizer.json: %w", path, err)
	}
	if tj.Model.Type != "BPE" {
		t := tj.Model.Type
		if t == "" {
			t = "none"
		}
		return nil, fmt.Errorf("tokenizer %s: unsupported model type %s (only byte-level BPE is supported)", path, t)
	}
	if tj.Model.Dropout != nil && *tj.Model.Dropout != 0 {
		return nil, fmt.Errorf("tokenizer %s: unsupported BPE dropout %v", path, *tj.Model.Dropout)
	}
	if p := tj.Model.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, fmt.Errorf("tokenizer %s: unsupported continuing_subword_prefix %q", path, *p)
	}
	if p := tj.Model.EndOfWordSuffix; p != nil && *p != "" {
		return nil, fmt.Errorf("tokenizer %s: unsupported end_of_word_suffix %q", path, *p)
	}
	if n := bytes.TrimSpace(tj.Normalizer); len(n) > 0 && string(n) != "null" {
		var t struct{ Type string }
		_ = json.Unmarshal(n, &t)
		return nil, fmt.Errorf("tokenizer %s: unsupported normalizer %s (only none)", path, t.Type)
	}
	pat, prefix, err := hfPattern(tj.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	var vocabJSON map[string]int
	if err := json.Unmarshal(tj.Model.Vocab, &vocabJSON); err != nil {
		return nil, fmt.Errorf("tokenizer %s: model.vocab: %w", path, err)
	}
	merges := make([][2]string, 0, len(tj.Model.Merges))
	for i, raw := range tj.Model.Merges {
		var m [2]string
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			l, r, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("tokenizer %s: merge %d %q is not \"LEFT RIGHT\"", path, i+1, trunc(s))
			}
			m = [2]string{l, r}
		} else if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("tokenizer %s: merge %d: %w", path, i+1, err)
		}
		merges = append(merges, m)
	}
	specials := map[string]int{}
	for _, t := range tj.AddedTokens {
		specials[t.Content] = t.ID
	}
	// Added tokens that are also in the vocabulary keep their id there;
	// those only in added_tokens extend it.
	b, err := buildMerged(path, path, pat, withoutSpecials(vocabJSON, specials), merges, nil)
	if err != nil {
		return nil, err
	}
	for s, id := range specials {
		if err := b.addSpecial(s, id); err != nil {
			return nil, err
		}
	}
	b.addPrefixSpace = prefix
	b.wholeFirst = tj.Model.IgnoreMerges
	return b, nil
}

// withoutSpecials returns vocab less the entries that are special tokens,
// so their text (not byte-level) is not decoded as tokens.
func withoutSpecials(vocab map[string]int, specials map[string]int) map[string]int {
	out := make(map[string]int, len(vocab))
	for s, id := range vocab {
		if sid, ok := specials[s]; ok && sid == id {
			continue
		}
		out[s] = id
	}
	return out
}

// hfPattern reads a tokenizer.json pre_tokenizer.
func hfPattern(raw json.RawMessage) (Pattern, bool, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return 0, false, fmt.Errorf("unsupported pre-tokenizer: none (want ByteLevel)")
	}
	var pt hfPreTok
	if err := json.Unmarshal(raw, &pt); err != nil {
		return 0, false, fmt.Errorf("pre_tokenizer: %w", err)
	}
	steps := []hfPreTok{pt}
	if pt.Type == "Sequence" {
		steps = pt.Pretokenizers
	}
	switch {
	case len(steps) == 1 && steps[0].Type == "ByteLevel" && (steps[0].UseRegex == nil || *steps[0].UseRegex):
		return PatternGPT2, steps[0].AddPrefixSpace, nil
	case len(steps) == 2 && steps[0].Type == "Split" && steps[1].Type == "ByteLevel" &&
		steps[1].UseRegex != nil && !*steps[1].UseRegex:
		s := steps[0]
		if s.Pattern.Regex == nil {
			return 0, false, fmt.Errorf("unsupported Split pre-tokenizer without a regex pattern")
		}
		if s.Behavior != "Isolated" || s.Invert {
			return 0, false, fmt.Errorf("unsupported Split pre-tokenizer behavior %s (invert %v); want Isolated", s.Behavior, s.Invert)
		}
		p, err := ParsePattern(*s.Pattern.Regex)
		if err != nil {
			return 0, false, err
		}
		return p, steps[1].AddPrefixSpace, nil
	}
	types := make([]string, len(steps))
	for i, s := range steps {
		types[i] = s.Type
		if s.Type == "ByteLevel" && s.UseRegex != nil && !*s.UseRegex {
			types[i] += "(use_regex=false)"
		}
	}
	return 0, false, fmt.Errorf("unsupported pre-tokenizer %s (want ByteLevel, or Split with the GPT-2/cl100k/o200k regex then ByteLevel)", strings.Join(types, "+"))
}
