package gptjob

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/data/shards"
	"github.com/gotrain/gotrain/datasets/gotext"
)

// prepared writes a dataset of the shipped corpus's bytes in shards of
// 40000 tokens, its last tenth the val split, with a vocabulary of vocab
// ids of which every 97th token uses one above 255; it returns the
// directory.
func prepared(t *testing.T, spec string, vocab int) string {
	t.Helper()
	corpus := gotext.Corpus()
	ids := make([]int, len(corpus))
	for i := range len(corpus) {
		ids[i] = int(corpus[i])
		if vocab > 256 && i%97 == 0 {
			ids[i] = 256 + i%(vocab-256)
		}
	}
	dir := t.TempDir()
	w, err := shards.Create(dir, spec, vocab, -1, 40000)
	if err != nil {
		t.Fatal(err)
	}
	split := len(ids) * 9 / 10
	if err := w.Write(shards.Train, ids[:split]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(shards.Val, ids[split:]); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRunOnShards: on a prepared dataset the model's vocabulary is the
// index's, training learns, and the sample is decoded by the index's
// tokenizer.
func TestRunOnShards(t *testing.T) {
	dir := prepared(t, "bytes", 300)
	cfg := tiny()
	cfg.Data, cfg.MaxSteps, cfg.EvalEvery, cfg.LR = dir, 30, 15, 1e-2
	j, err := newJob(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v := j.modelConfig().VocabSize; v != 300 {
		t.Fatalf("model vocabulary %d, want the index's 300", v)
	}
	// Training windows are block-size apart, within the shards.
	if tw := j.data.train.Len(); tw < 1000 || tw > len(gotext.Corpus())/16 {
		t.Fatalf("%d training windows", tw)
	}
	j.close()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// ln 300 = 5.7 untrained.
	if res.Steps != 30 || !(res.TrainLoss < 4.5 && res.ValLoss < 4.5 && res.ValLoss > 1) {
		t.Fatalf("result %+v", res)
	}
	// The index's tokenizer ("bytes") must match its vocabulary to
	// decode a sample.
	cfg.Sample = 10
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), `its tokenizer "bytes" has 256 ids, the index says 300`) {
		t.Fatalf("err = %v", err)
	}
	cfg.Data = prepared(t, "bytes", 256)
	cfg.Sample = 25
	if res, err = Run(context.Background(), cfg); err != nil || len(res.Sample) != 25 {
		t.Fatalf("sample %q, err %v", res.Sample, err)
	}
}

// TestResumeOnShards: 6 steps, a checkpoint and 6 resumed steps print the
// same losses as 12 straight steps on a prepared dataset: the sampler's
// position over the shards' windows comes back.
func TestResumeOnShards(t *testing.T) {
	dir := prepared(t, "bytes", 256)
	var straightOut bytes.Buffer
	cfg := tiny()
	cfg.Data, cfg.Out = dir, &straightOut
	straight, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Save = filepath.Join(t.TempDir(), "gpt.safetensors")
	cfg.Resume = true
	first := cfg
	first.SaveEvery = 6
	stop := &stopAfter{n: 6}
	first.Out = stop
	ctx, cancel := context.WithCancel(context.Background())
	stop.cancel = cancel
	if _, err := Run(ctx, first); err == nil {
		t.Fatal("the interrupted run did not stop")
	}
	var resumedOut bytes.Buffer
	cfg.Out = &resumedOut
	resumed, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, got := linesWith(straightOut.String(), "step 12:"), linesWith(resumedOut.String(), "step 12:")
	if resumed.Steps != 6 || resumed.ValLoss != straight.ValLoss || resumed.TrainLoss != straight.TrainLoss || want == "" || got != want {
		t.Fatalf("resumed: %d steps, %q; straight: %q", resumed.Steps, got, want)
	}
}

// linesWith returns the lines of s that start with prefix.
func linesWith(s, prefix string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestShardsBadToken: an id outside the vocabulary stops training with
// an error naming the shard and the position.
func TestShardsBadToken(t *testing.T) {
	dir := prepared(t, "bytes", 256)
	path := filepath.Join(dir, "train-000000.bin")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Every token of the first shard: whichever window is drawn first.
	for i := 0; i < len(b); i += 2 {
		binary.LittleEndian.PutUint16(b[i:], 256)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := tiny()
	cfg.Data = dir
	_, err = Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), path+": token id 256 at position ") || !strings.Contains(err.Error(), "outside the vocabulary of size 256") {
		t.Fatalf("err = %v", err)
	}
}

// TestBadDatasets: a dataset that cannot be trained on is an error naming
// its file, before training.
func TestBadDatasets(t *testing.T) {
	dir := prepared(t, "bytes", 256)
	if err := os.Truncate(filepath.Join(dir, "val-000000.bin"), 3); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	noVal := t.TempDir()
	w, _ := shards.Create(noVal, "bytes", 256, -1, 0)
	_ = w.Write(shards.Train, make([]int, 1000))
	_, _ = w.Close()
	for _, c := range []struct{ dir, want string }{
		{dir, filepath.Join(dir, "val-000000.bin") + " has 3 bytes"},
		{empty, empty + " is not a prepared dataset: it has no index.json"},
		{noVal, noVal + " has no validation tokens"},
	} {
		cfg := tiny()
		cfg.Data = c.dir
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
		if err := CheckData(c.dir, 16); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckData: %v, want %q", err, c.want)
		}
	}
	cfg := tiny()
	cfg.Data, cfg.BlockSize = prepared(t, "bytes", 256), 50000
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "no window of 50000 tokens") {
		t.Errorf("block size beyond every shard: %v", err)
	}
}

// TestPresets: --preset sets the sizes not given, before or after it.
func TestPresets(t *testing.T) {
	for _, c := range []struct {
		args []string
		want [4]int
	}{
		{[]string{"--preset", "gpt2"}, [4]int{12, 12, 768, 1024}},
		{[]string{"--preset", "gpt2-medium"}, [4]int{24, 16, 1024, 1024}},
		{[]string{"--preset", "gpt2-large", "--block-size", "256"}, [4]int{36, 20, 1280, 256}},
		{[]string{"--n-layer", "2", "--preset", "gpt2-xl"}, [4]int{2, 25, 1600, 1024}},
		{nil, [4]int{4, 4, 128, 128}},
	} {
		var cfg Config
		f := pflag.NewFlagSet("gpt", pflag.ContinueOnError)
		cfg.RegisterFlags(f)
		if err := f.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := [4]int{cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize}; got != c.want {
			t.Errorf("%v: sizes %v, want %v", c.args, got, c.want)
		}
		if err := cfg.CheckFlags(f); err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
	}
	// The Config's own: the preset fills the sizes left 0.
	d := Config{Preset: "gpt2-xl", NHead: 32}.withDefaults()
	if d.NLayer != 48 || d.NHead != 32 || d.NEmbd != 1600 || d.BlockSize != 1024 {
		t.Fatalf("withDefaults: %+v", d)
	}
	var cfg Config
	f := pflag.NewFlagSet("gpt", pflag.ContinueOnError)
	cfg.RegisterFlags(f)
	if err := f.Parse([]string{"--preset", "gpt3"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckFlags(f); err == nil || err.Error() != "--preset gpt3: must be gpt2, gpt2-medium, gpt2-large or gpt2-xl" {
		t.Fatalf("err = %v", err)
	}
	if _, err := Run(context.Background(), Config{Preset: "gpt3"}); err == nil || !strings.Contains(err.Error(), `Preset "gpt3"`) {
		t.Fatalf("Run: %v", err)
	}
}

// TestMemoryEstimateUsesTheDataVocabulary: a dataset's vocabulary sizes
// the embeddings and logits the estimate counts.
func TestMemoryEstimateUsesTheDataVocabulary(t *testing.T) {
	text := Config{}.MemoryEstimate().Bytes
	big := Config{Data: prepared(t, "bytes", 4096)}.MemoryEstimate().Bytes
	if !(big > text) {
		t.Fatalf("estimate %v for a vocabulary of 4096, %v for 256", big, text)
	}
}
