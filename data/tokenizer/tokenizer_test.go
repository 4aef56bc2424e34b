package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/gotrain/gotrain/datasets/gotext"
)

var allBuiltins = []string{"gpt2", "r50k_base", "cl100k_base", "o200k_base"}

// randomText returns text drawn from runes of every class the
// pre-tokenizers tell apart; valid UTF-8 unless invalid is set.
func randomText(r *rand.Rand, n int, invalid bool) string {
	pool := []string{"a", "Z", "'", "s", "S", "re", "LL", " ", "  ", "\t", "\n", "\r\n", "0", "42", "123456",
		",", ".", "/", "é", "Ö", "ß", "ǅ", "ʰ", "\u0301", "日本", "한", "٣", "½", "👍", "🏽", "\u200d", "\u00a0",
		"\u3000", "€", "ſ", "<|endoftext|>", "hello", " world", "func", "ab"}
	if invalid {
		pool = append(pool, "\xff", "\xc3", "\xe6\x97", "\x80\x80", "\xf0\x9f\x91")
	}
	var sb strings.Builder
	for range n {
		sb.WriteString(pool[r.IntN(len(pool))])
	}
	return sb.String()
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, name := range allBuiltins {
		b, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			text := randomText(r, 1+i%60, i%3 == 0)
			ids := b.Encode(text)
			got, err := b.Decode(ids)
			if err != nil || got != text {
				t.Fatalf("%s: Decode(Encode(%q)) = %q, %v", name, text, got, err)
			}
		}
		// Arbitrary valid UTF-8, any code point.
		for range 200 {
			rs := make([]rune, 1+r.IntN(30))
			for j := range rs {
				rs[j] = rune(r.IntN(0x110000))
				if !utf8.ValidRune(rs[j]) {
					rs[j] = 'x'
				}
			}
			text := string(rs)
			got, err := b.Decode(b.Encode(text))
			if err != nil || got != text {
				t.Fatalf("%s: Decode(Encode(%q)) = %q, %v", name, text, got, err)
			}
		}
	}
}

// TestInvalidUTF8 checks that an invalid byte splits like U+FFFD (a
// symbol) and is kept as itself.
func TestInvalidUTF8(t *testing.T) {
	for _, p := range []Pattern{PatternGPT2, PatternCL100K, PatternO200K} {
		got := p.Split("ab\xffcd \xff\xfe!")
		want := p.Split("ab\uFFFDcd \uFFFD\uFFFD!")
		if len(got) != len(want) {
			t.Fatalf("pattern %d: %q vs %q", p, got, want)
		}
		for i := range got {
			if strings.ReplaceAll(strings.ReplaceAll(got[i], "\xff", "\uFFFD"), "\xfe", "\uFFFD") != want[i] {
				t.Errorf("pattern %d: piece %d %q, want like %q", p, i, got[i], want[i])
			}
		}
	}
}

// TestMergeHeapEqualsScan checks the two merge algorithms against each
// other on long pieces, for tiktoken ranks and for merge lists.
func TestMergeHeapEqualsScan(t *testing.T) {
	hf, err := LoadHFJSON(filepath.Join("testdata", "hf_bpe", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Builtin("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	letters := "aaabbnnerst  é日"
	for range 300 {
		var sb strings.Builder
		for sb.Len() < 1+r.IntN(heapMin-1) {
			sb.WriteByte(letters[r.IntN(len(letters))])
		}
		piece := sb.String()
		for _, b := range []*BPE{hf, cl} {
			if g, w := b.mergeHeap(piece), b.mergeScan(piece); !slices.Equal(g, w) {
				t.Fatalf("%s %q: heap %v, scan %v", b.name, piece, g, w)
			}
		}
	}
}

func TestEncodeParallel(t *testing.T) {
	corpus := gotext.Corpus()
	r := rand.New(rand.NewPCG(5, 6))
	mixed := randomText(r, 40000, true)
	for _, name := range []string{"gpt2", "cl100k_base", "o200k_base"} {
		b, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{corpus, mixed} {
			want := b.Encode(text)
			if got := b.EncodeParallel(text, 4); !slices.Equal(got, want) {
				t.Fatalf("%s: EncodeParallel differs from Encode (%d vs %d ids)", name, len(got), len(want))
			}
		}
		docs := strings.SplitAfter(corpus[:50000], "\n\n")
		got := b.EncodeBatch(docs, 3)
		for i, d := range docs {
			if !slices.Equal(got[i], b.Encode(d)) {
				t.Fatalf("%s: EncodeBatch doc %d differs", name, i)
			}
		}
	}
}

// TestSafeBoundary checks every split place is a piece boundary.
func TestSafeBoundary(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, p := range []Pattern{PatternGPT2, PatternCL100K, PatternO200K} {
		texts := []string{")\n\nfor x", "a  \nfor x", "a\t\nb c", "x)\nfor y\n\n\nz", "end.\nNext one"}
		for range 200 {
			texts = append(texts, randomText(r, 200, true))
		}
		for _, text := range texts {
			// A cut is safe when the pieces of the two sides are the
			// pieces of the whole: the side before it ends as the whole
			// would continue.
			whole := strings.Join(p.Split(text), "\x00")
			for k := safeBoundary(text, 1); k > 0; k = safeBoundary(text, k+1) {
				cut := strings.Join(append(p.Split(text[:k]), p.Split(text[k:])...), "\x00")
				if cut != whole {
					t.Fatalf("pattern %d: cutting %q at %d changes its pieces", p, text, k)
				}
			}
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	b, err := Builtin("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	text := gotext.Corpus()[:20000]
	want := b.Encode(text)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			if got := b.Encode(text); !slices.Equal(got, want) {
				errs <- "concurrent Encode differs"
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func TestSpecialTokens(t *testing.T) {
	b, err := Builtin("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := b.EndOfText(); !ok || id != 100257 {
		t.Fatalf("EndOfText = %d, %v", id, ok)
	}
	text := "a<|endoftext|>b<|fim_prefix|>"
	got := b.EncodeWithSpecial(text, []string{"<|endoftext|>"})
	if !slices.Contains(got, 100257) || slices.Contains(got, 100258) {
		t.Fatalf("EncodeWithSpecial allowed only <|endoftext|>: %v", got)
	}
	if slices.Contains(b.Encode(text), 100257) {
		t.Fatal("Encode turned special-token text into its id")
	}
	if dec, err := b.Decode(got); err != nil || dec != text {
		t.Fatalf("Decode = %q, %v", dec, err)
	}
	if _, ok := (Bytes{}).EndOfText(); ok {
		t.Fatal("bytes has an EOT")
	}
}

func TestBytes(t *testing.T) {
	tk, err := Load("bytes")
	if err != nil {
		t.Fatal(err)
	}
	text := "hé\xff"
	ids := tk.Encode(text)
	if !slices.Equal(ids, []int{'h', 0xc3, 0xa9, 0xff}) || tk.VocabSize() != 256 {
		t.Fatalf("bytes Encode = %v", ids)
	}
	if s, err := tk.Decode(ids); err != nil || s != text {
		t.Fatalf("Decode = %q, %v", s, err)
	}
	if _, err := tk.Decode([]int{1, 256}); err == nil || !strings.Contains(err.Error(), "id 256") {
		t.Fatalf("Decode(256) error = %v", err)
	}
}

func TestDecodeOutOfVocabulary(t *testing.T) {
	b, err := Builtin("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{50257, -1, 1 << 40} {
		_, err := b.Decode([]int{31373, id})
		if err == nil || !strings.Contains(err.Error(), "outside the vocabulary") || !strings.Contains(err.Error(), "position 1") {
			t.Errorf("Decode(%d) error = %v", id, err)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	hf, err := os.ReadFile(filepath.Join("testdata", "go_trained", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	hfs := string(hf)
	cases := []struct {
		name, file, content, want string
	}{
		{"wordpiece", "wp.json", `{"model":{"type":"WordPiece","vocab":{"a":0}},"pre_tokenizer":{"type":"BertPreTokenizer"}}`, "unsupported model type WordPiece"},
		{"unigram", "ug.json", `{"model":{"type":"Unigram","vocab":[["a",0.0]]}}`, "unsupported model type Unigram"},
		{"regex", "re.json", strings.Replace(hfs, `"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`,
			`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\w+|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`, 1), `unsupported pre-tokenizer pattern "\\w+|\\s+"`},
		{"whitespace", "ws.json", strings.Replace(hfs, `"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`,
			`"pre_tokenizer":{"type":"Whitespace"}`, 1), "unsupported pre-tokenizer Whitespace"},
		{"normalizer", "nfc.json", strings.Replace(hfs, `"normalizer":null`, `"normalizer":{"type":"NFC"}`, 1), "unsupported normalizer NFC"},
		{"not json", "bad.json", `{"model":`, "not a tokenizer.json"},
		{"tiktoken line", "x.tiktoken", "IQ== 0\nnot-a-line\n", "x.tiktoken:2: want \"BASE64 RANK\""},
		{"tiktoken base64", "y.tiktoken", "!!! 0\n", "bad base64 token"},
		{"tiktoken bytes", "z.tiktoken", "IQ== 0\n", "byte 0x00 has no token"},
		{"unknown kind", "notes.txt", "hello", "unknown file kind"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, dir, c.file, c.content)
			_, err := Load(p)
			if err == nil {
				t.Fatalf("Load(%s) succeeded", c.file)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, c.file) || strings.Contains(msg, "\n") {
				t.Fatalf("error %q: want one line naming %s and %q", msg, c.file, c.want)
			}
		})
	}
	// vocab.json without merges.txt; merges naming unknown tokens.
	gdir := filepath.Join(dir, "gpt2")
	if err := os.Mkdir(gdir, 0o755); err != nil {
		t.Fatal(err)
	}
	vj := writeFile(t, gdir, "vocab.json", `{"a":0}`)
	if _, err := Load(vj); err == nil || !strings.Contains(err.Error(), "merges.txt") {
		t.Fatalf("missing merges.txt: %v", err)
	}
	writeFile(t, gdir, "merges.txt", "#version: 0.2\na q\n")
	if _, err := Load(gdir); err == nil || !strings.Contains(err.Error(), `merge 1 "a" "q"`) {
		t.Fatalf("bad merge: %v", err)
	}
	for _, spec := range []string{"", "nope_base", filepath.Join(dir, "missing.json")} {
		if _, err := Load(spec); err == nil {
			t.Fatalf("Load(%q) succeeded", spec)
		}
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither tokenizer.json nor vocab.json") {
		t.Fatalf("empty dir: %v", err)
	}
}

// TestTiktokenFile loads a rank file written from a built-in encoding and
// checks it encodes the same, with the encoding's special tokens.
func TestTiktokenFile(t *testing.T) {
	b, err := Builtin("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for id, tok := range b.vocab {
		sb.WriteString(b64(tok))
		sb.WriteByte(' ')
		sb.WriteString(itoa(id))
		sb.WriteByte('\n')
	}
	p := writeFile(t, t.TempDir(), "cl100k_base.tiktoken", sb.String())
	tk, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	text := gotext.Corpus()[:5000] + " 'S 12345 <|endoftext|>"
	if !slices.Equal(tk.Encode(text), b.Encode(text)) {
		t.Fatal("rank file encodes differently from the built-in encoding")
	}
	if id, ok := tk.EndOfText(); !ok || id != 100257 {
		t.Fatalf("EndOfText = %d, %v", id, ok)
	}
}

// TestGPT2IsR50K checks tiktoken's gpt2 = r50k_base + <|endoftext|> 50256.
func TestGPT2IsR50K(t *testing.T) {
	g, err := Builtin("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Builtin("r50k_base")
	if err != nil {
		t.Fatal(err)
	}
	if g.VocabSize() != 50257 || r.VocabSize() != 50257 {
		t.Fatalf("vocab sizes %d %d", g.VocabSize(), r.VocabSize())
	}
	if id, _ := g.EndOfText(); id != 50256 {
		t.Fatalf("gpt2 EOT %d", id)
	}
}

func TestTrainErrors(t *testing.T) {
	ctx := t.Context()
	texts := slices.Values([]string{"hello hello hello"})
	if _, err := Train(ctx, texts, 100, nil); err == nil || !strings.Contains(err.Error(), "below 256") {
		t.Fatalf("small vocab: %v", err)
	}
	if _, err := Train(ctx, texts, 300, []string{"<a>", "<a>"}); err == nil || !strings.Contains(err.Error(), "repeated") {
		t.Fatalf("repeated special: %v", err)
	}
	b, err := Train(ctx, texts, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Training stops when no pair occurs twice.
	if b.VocabSize() >= 1000 || b.VocabSize() <= 256 {
		t.Fatalf("vocab size %d", b.VocabSize())
	}
	if ids := b.Encode("hello hello"); len(ids) != 2 {
		t.Fatalf("Encode after training = %v, want 2 ids", ids)
	}
	cl, _ := Builtin("cl100k_base")
	if err := cl.SaveJSON(filepath.Join(t.TempDir(), "x.json")); err == nil || !strings.Contains(err.Error(), "cannot be saved") {
		t.Fatalf("saving ranks: %v", err)
	}
}
