package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/data/tokenizer"
	"github.com/gotrain/gotrain/datasets/gotext"
)

func parseIDs(t *testing.T, s string) []int {
	t.Helper()
	var ids []int
	for _, f := range strings.Fields(s) {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("output %q: %v", s, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestTokenizerEncodeDecode: encode prints tiktoken's ids, decode gives the
// text back, for text arguments and --file.
func TestTokenizerEncodeDecode(t *testing.T) {
	all, out, code := runGotrain(t, time.Minute, "tokenizer", "encode", "--tokenizer", "gpt2", "Hello", "world")
	if code != 0 || out != "15496 995\n" {
		t.Fatalf("encode: exit %d, output %q", code, all)
	}
	all, out, code = runGotrain(t, time.Minute, "tokenizer", "decode", "--tokenizer", "gpt2", "15496", "995")
	if code != 0 || out != "Hello world\n" {
		t.Fatalf("decode: exit %d, output %q", code, all)
	}
	text := gotext.Corpus()[:30000]
	file := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	enc, err := tokenizer.Builtin("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	all, out, code = runGotrain(t, time.Minute, "tokenizer", "encode", "--tokenizer", "cl100k_base", "--file", file)
	if code != 0 {
		t.Fatalf("encode --file: exit %d: %s", code, all)
	}
	if got := parseIDs(t, out); !slices.Equal(got, enc.Encode(text)) {
		t.Fatalf("encode --file printed %d ids, differing from Encode", len(got))
	}
	// --special turns <|endoftext|> into its id.
	_, out, code = runGotrain(t, time.Minute, "tokenizer", "encode", "--tokenizer", "cl100k_base", "--special", "a<|endoftext|>b")
	if code != 0 || out != "64 100257 65\n" {
		t.Fatalf("encode --special: exit %d, output %q", code, out)
	}
}

// TestTokenizerRefusals: bad input is one line naming what is wrong.
func TestTokenizerRefusals(t *testing.T) {
	dir := t.TempDir()
	wp := filepath.Join(dir, "wp.json")
	if err := os.WriteFile(wp, []byte(`{"model":{"type":"WordPiece","vocab":{}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.txt")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"decode", "15496", "x1"}, exitUsage, `"x1" is not a token id`},
		{[]string{"decode", "15496", "50257"}, exitFailure, "id 50257 at position 1 is outside the vocabulary"},
		{[]string{"encode", "--tokenizer", wp, "hi"}, exitUsage, wp + ": unsupported model type WordPiece"},
		{[]string{"encode", "--tokenizer", "nope_base", "hi"}, exitUsage, "--tokenizer nope_base: not a built-in encoding"},
		{[]string{"encode", "--file", missing}, exitUsage, missing + ": no such file"},
		{[]string{"train", "--vocab-size", "300", "--out", dir, missing}, exitUsage, missing + ": no such file"},
		{[]string{"train", "--vocab-size", "10", "--out", dir, wp}, exitUsage, "--vocab-size 10: must be at least 257"},
		{[]string{"train", "--vocab-size", "300", wp}, exitUsage, "--out DIR is required"},
		{[]string{"frob"}, exitUsage, `unknown command "frob"`},
	} {
		args := append([]string{"tokenizer"}, tc.args...)
		all, _, code := runGotrain(t, time.Minute, args...)
		if code != tc.code || !strings.Contains(all, tc.want) || strings.Count(strings.TrimSpace(all), "\n") != 0 {
			t.Errorf("gotrain %s: exit %d, output:\n%s\nwant exit %d and one line with %q", strings.Join(args, " "), code, all, tc.code, tc.want)
		}
	}
}

// TestTokenizerTrain: train writes a tokenizer.json (and GPT-2 files)
// that encode and decode load, equal to the library's Train.
func TestTokenizerTrain(t *testing.T) {
	dir := t.TempDir()
	corpus := gotext.Corpus()[:40000]
	files := []string{filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")}
	if err := os.WriteFile(files[0], []byte(corpus[:20000]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[1], []byte(corpus[20000:]), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tok")
	all, stdout, code := runGotrain(t, time.Minute, append([]string{"tokenizer", "train", "--vocab-size", "600", "--out", out}, files...)...)
	if code != 0 || !strings.Contains(all, "merges") || !strings.HasPrefix(stdout, "vocab_size=600 saved=") {
		t.Fatalf("train: exit %d, output:\n%s", code, all)
	}
	for _, f := range []string{"tokenizer.json", "vocab.json", "merges.txt"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	lines := append(strings.SplitAfter(corpus[:20000], "\n"), strings.SplitAfter(corpus[20000:], "\n")...)
	lib, err := tokenizer.Train(t.Context(), slices.Values(lines), 600, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	text := "func (b *Buffer) WriteString(s string) (n int, err error) {"
	for _, spec := range []string{out, filepath.Join(out, "tokenizer.json"), filepath.Join(out, "vocab.json")} {
		_, ids, code := runGotrain(t, time.Minute, "tokenizer", "encode", "--tokenizer", spec, text)
		if code != 0 {
			t.Fatalf("encode --tokenizer %s: exit %d", spec, code)
		}
		got := parseIDs(t, ids)
		if want := lib.Encode(text); !slices.Equal(got, want) || len(got) >= len(text)/2 {
			t.Errorf("--tokenizer %s: ids %v, want %v from Train", spec, got, want)
		}
		args := []string{"tokenizer", "decode", "--tokenizer", spec}
		for _, id := range got {
			args = append(args, strconv.Itoa(id))
		}
		_, dec, code := runGotrain(t, time.Minute, args...)
		if code != 0 || dec != text+"\n" {
			t.Errorf("decode --tokenizer %s: exit %d, %q", spec, code, dec)
		}
	}
}

// TestTokenizerBench runs the benchmark command on a tiny file.
func TestTokenizerBench(t *testing.T) {
	file := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(file, []byte(gotext.Corpus()[:4000]), 0o644); err != nil {
		t.Fatal(err)
	}
	all, out, code := runGotrain(t, time.Minute, "tokenizer", "bench", "--tokenizer", "gpt2", "--min-time", "1ms", "--threads", "2", file)
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, all)
	}
	kv := summary(t, out)
	if kv["bytes"] != "4000" || kv["threads"] != "2" || num(t, kv, "mb_per_s_1") <= 0 || num(t, kv, "mb_per_s_N") <= 0 {
		t.Fatalf("bench output %q", out)
	}
}
