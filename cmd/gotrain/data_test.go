package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/data/shards"
	"github.com/gotrain/gotrain/datasets/gotext"
)

// corpusFiles writes the shipped corpus as n text files under a new
// directory, and returns it.
func corpusFiles(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	c := gotext.Corpus()
	for i := range n {
		part := c[i*len(c)/n : (i+1)*len(c)/n]
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("doc%02d.txt", i)), []byte(part), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestDataPrepare: a directory of text files and a JSONL file become a
// dataset, the same with 1 worker and 2, with progress on stderr and a
// summary on stdout.
func TestDataPrepare(t *testing.T) {
	in := corpusFiles(t, 10)
	jl := filepath.Join(t.TempDir(), "more.jsonl")
	if err := os.WriteFile(jl, []byte(`{"text":"first"}`+"\n"+`{"text":"second","id":2}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var sums [][]string
	for _, workers := range []string{"1", "2"} {
		out := filepath.Join(t.TempDir(), "ds")
		all, stdout, code := runGotrain(t, 60*time.Second, "data", "prepare", "--tokenizer", "bytes", "--out", out,
			"--val-fraction", "0.25", "--shard-tokens", "100000", "--workers", workers, in, jl)
		if code != 0 {
			t.Fatalf("exit code %d; output:\n%s", code, all)
		}
		kv := summary(t, stdout)
		if kv["dataset"] != out || kv["tokenizer"] != "bytes" || kv["vocab_size"] != "256" || kv["dtype"] != "uint16" || kv["documents"] != "12" || kv["workers"] != workers {
			t.Fatalf("summary %v", kv)
		}
		if !strings.Contains(all, "prepared: ") {
			t.Fatalf("no progress line; output:\n%s", all)
		}
		idx, err := shards.ReadIndex(out)
		if err != nil {
			t.Fatal(err)
		}
		// Documents 3, 7 and 11 (from 0) are held out: the last is the
		// JSONL's second line.
		if n := idx.SplitTokens(shards.Val); kv["val_tokens"] != fmt.Sprint(n) || n == 0 {
			t.Fatalf("val tokens %d, summary %v", n, kv)
		}
		if got, want := idx.SplitTokens(shards.Train)+idx.SplitTokens(shards.Val), int64(len(gotext.Corpus())+len("first")+len("second")); got != want {
			t.Fatalf("%d tokens, want the %d bytes of the inputs", got, want)
		}
		tok, err := shards.Open(out, shards.Train)
		if err != nil {
			t.Fatal(err)
		}
		if err := tok.Verify(); err != nil {
			t.Fatal(err)
		}
		_ = tok.Close()
		var sum []string
		for _, s := range idx.Shards {
			sum = append(sum, s.File+" "+s.SHA256)
		}
		sums = append(sums, sum)
	}
	if !slices.Equal(sums[0], sums[1]) {
		t.Fatalf("1 worker wrote %v, 2 workers %v", sums[0], sums[1])
	}
}

// TestDataPrepareBadInput: each mistake is one line naming it; a bad
// command line exits 2, a bad input 1, and --out is then no dataset.
func TestDataPrepareBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.txt", "some text\n")
	latin1 := write("latin1.txt", "ok\ncaf\xe9\n")
	notJSON := write("notjson.jsonl", "{\"text\":\"a\"}\nnot json\n")
	noField := write("nofield.jsonl", "{\"text\":\"a\"}\n{\"body\":\"b\"}\n")
	file := write("file", "")
	prep := func(args ...string) []string { return append([]string{"data", "prepare"}, args...) }
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{prep("--out", dir+"/o", good), 2, "gotrain: --tokenizer: is required"},
		{prep("--tokenizer", "bytes", good), 2, "gotrain: --out: is required"},
		{prep("--tokenizer", "bytes", "--out", dir+"/o"), 2, "gotrain: data prepare: no INPUT"},
		{prep("--tokenizer", "bytes", "--out", dir+"/o", "--val-fraction", "1", good), 2, "gotrain: --val-fraction 1: must be at least 0 and below 1"},
		{prep("--tokenizer", "bytes", "--out", dir+"/o", "--shard-tokens", "0", good), 2, "gotrain: --shard-tokens 0: must be at least 1"},
		{prep("--tokenizer", "bytes", "--out", dir+"/o", "--workers", "-1", good), 2, "gotrain: --workers -1: must be at least 0"},
		{prep("--tokenizer", "bytes", "--out", file, good), 2, "gotrain: --out " + file + ": is a file, not a directory"},
		{prep("--tokenizer", filepath.Join(dir, "nope.json"), "--out", dir+"/o", good), 2, "gotrain: --tokenizer " + filepath.Join(dir, "nope.json") + ": "},
		{prep("--tokenizer", "bytes", "--out", dir+"/o", good, latin1), 1, "gotrain: " + latin1 + ":2: not UTF-8 text (invalid byte 0xe9 at offset 6)"},
		{prep("--tokenizer", "bytes", "--out", dir+"/o", notJSON), 1, "gotrain: " + notJSON + ":2: not a JSON object"},
		{prep("--tokenizer", "bytes", "--out", dir+"/o", noField), 1, "gotrain: " + noField + `:2: no field "text"`},
		{prep("--tokenizer", "bytes", "--out", dir+"/o", "--jsonl-field", "body", noField), 1, "gotrain: " + noField + `:1: no field "body"`},
		{prep("--tokenizer", "bytes", "--out", dir+"/o", filepath.Join(dir, "missing.txt")), 1, "gotrain: " + filepath.Join(dir, "missing.txt") + ": cannot be read: no such file or directory"},
	} {
		all, _, code := runGotrain(t, 30*time.Second, c.args...)
		out := strings.TrimSuffix(all, "\n")
		switch {
		case code != c.code:
			t.Errorf("gotrain %s: exit code %d, want %d; output:\n%s", strings.Join(c.args, " "), code, c.code, all)
		case strings.Contains(out, "\n"):
			t.Errorf("gotrain %s: want one line, got:\n%s", strings.Join(c.args, " "), all)
		case !strings.HasPrefix(out, c.want):
			t.Errorf("gotrain %s: %q does not start with %q", strings.Join(c.args, " "), out, c.want)
		}
		if shards.IsDataset(dir + "/o") {
			t.Fatalf("gotrain %s left a dataset", strings.Join(c.args, " "))
		}
	}
}

// TestTrainGPTOnShards: `gotrain train gpt --data DIR` trains two workers
// on a dataset `gotrain data prepare` wrote, validates on its val split
// and samples through its tokenizer; a bad dataset is one line from the
// launching process.
func TestTrainGPTOnShards(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ds")
	all, _, code := runGotrain(t, 60*time.Second, "data", "prepare", "--tokenizer", "bytes", "--out", out, "--val-fraction", "0.1", corpusFiles(t, 20))
	if code != 0 {
		t.Fatalf("prepare: exit code %d; output:\n%s", code, all)
	}
	args := append(append([]string(nil), tinyGPT...), "--data", out, "--progress=false", "--sample", "30", "--nproc-per-node", "2")
	all, stdout, code := runGotrain(t, 60*time.Second, args...)
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	kv := summary(t, stdout)
	if kv["model"] != "gpt" || kv["world"] != "2" || kv["steps"] != "10" {
		t.Fatalf("summary %v", kv)
	}
	for _, key := range []string{"train_loss", "val_loss"} {
		if l := num(t, kv, key); !(l > 1 && l < 5.4) {
			t.Fatalf("%s=%v after 10 steps", key, l)
		}
	}
	if !strings.Contains(stdout, "sample:\n") || len(linesWith(all, "step 10: train_loss=")) != 1 {
		t.Fatalf("want a sample and an evaluation at step 10; output:\n%s", all)
	}
	if len(linesWith(all, "corpus="+out, "vocab=256")) != 2 {
		t.Fatalf("want each worker to log the dataset; output:\n%s", all)
	}

	// Refused before any worker starts, naming the file.
	if err := os.Truncate(filepath.Join(out, "val-000000.bin"), 1); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", out}, "gotrain: --data " + out + ": " + filepath.Join(out, "val-000000.bin") + " has 1 bytes"},
		{[]string{"--data", empty}, "gotrain: --data " + empty + ": " + empty + " is not a prepared dataset: it has no index.json"},
		{[]string{"--preset", "gpt3"}, "gotrain: --preset gpt3: must be gpt2, gpt2-medium, gpt2-large or gpt2-xl"},
	} {
		args := append([]string{"train", "gpt", "--nproc-per-node", "2"}, c.args...)
		all, _, code := runGotrain(t, 30*time.Second, args...)
		if out := strings.TrimSuffix(all, "\n"); code != 2 || strings.Contains(out, "\n") || !strings.HasPrefix(out, c.want) {
			t.Errorf("gotrain %s: exit code %d, output %q; want 2 and %q", strings.Join(args, " "), code, all, c.want)
		}
	}
}
