package gptjob

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/harness"
)

// tiny is a config small enough for a test: a one-block GPT of width 16
// on windows of 16 bytes.
func tiny() Config {
	return Config{NLayer: 1, NHead: 2, NEmbd: 16, BlockSize: 16, BatchSize: 4, MaxSteps: 12, EvalEvery: 6, EvalBatches: 2,
		WarmupSteps: new(2), LR: 3e-3, Seed: 1,
		Config: harness.Config{Out: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
}

func TestRunTrainsAndSamples(t *testing.T) {
	cfg := tiny()
	var out bytes.Buffer
	cfg.Out, cfg.Sample, cfg.MaxSteps, cfg.EvalEvery, cfg.LR = &out, 40, 40, 20, 1e-2
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 40 || res.World != 1 || len(res.Sample) != 40 {
		t.Fatalf("result %+v", res)
	}
	// An untrained byte model scores ln 256 = 5.55; forty steps must
	// have learned at least the byte frequencies of Go source.
	if !(res.TrainLoss < 4 && res.ValLoss < 4 && res.ValLoss > 1) {
		t.Fatalf("train_loss %v val_loss %v after 40 steps", res.TrainLoss, res.ValLoss)
	}
	for _, want := range []string{"step 20: train_loss=", "step 40: train_loss="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	s := res.Summary()
	if !strings.HasPrefix(s, "model=gpt world=1 steps=40 tokens_per_s=") || !strings.Contains(s, " train_loss=") || !strings.Contains(s, " val_loss=") || !strings.Contains(s, " peak_rss_mib=") {
		t.Fatalf("summary %q", s)
	}
}

// TestResumeContinuesTheSameRun checks that 6 steps, a checkpoint and 6
// resumed steps end where 12 straight steps do: weights, AdamW moments,
// the schedule and the data position all come back.
func TestResumeContinuesTheSameRun(t *testing.T) {
	straight, err := Run(context.Background(), tiny())
	if err != nil {
		t.Fatal(err)
	}
	cfg := tiny()
	cfg.Save = filepath.Join(t.TempDir(), "gpt.safetensors")
	cfg.Resume, cfg.MaxSteps, cfg.EvalEvery = true, 12, 6
	first := cfg
	first.SaveEvery = 6
	stop := &stopAfter{n: 6}
	first.Out = stop
	// The first run is cut after its sixth step's checkpoint by
	// cancelling its context from the evaluation line it prints.
	ctx, cancel := context.WithCancel(context.Background())
	stop.cancel = cancel
	if _, err := Run(ctx, first); err == nil {
		t.Fatal("the interrupted run did not stop")
	}
	resumed, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Steps != 6 || resumed.ValLoss != straight.ValLoss {
		t.Fatalf("resumed: %d steps, val_loss %v; straight run val_loss %v", resumed.Steps, resumed.ValLoss, straight.ValLoss)
	}
}

// stopAfter cancels the run when it prints its step-n evaluation line.
type stopAfter struct {
	n      int
	cancel func()
}

func (s *stopAfter) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), "step 6:") {
		s.cancel()
	}
	return len(p), nil
}

func TestBadCorpusFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty.txt", nil, "is empty"},
		{"latin1.txt", []byte("caf\xe9 " + strings.Repeat("x", 100)), "is not UTF-8 text (invalid byte 0xe9 at offset 3)"},
		{"short.txt", []byte("package main\n"), "short.txt (13 bytes) is too short for the block size 16"},
	} {
		cfg := tiny()
		cfg.Data = write(c.name, c.data)
		_, err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), cfg.Data) {
			t.Errorf("%s: err = %v, want one naming the file and %q", c.name, err, c.want)
		}
	}
}

func TestBadBatches(t *testing.T) {
	j, err := newJob(context.Background(), tiny())
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	ids := make([]int, 2*16)
	ids[5] = 300
	_, err = j.step(context.Background(), harness.Step{}, data.Batch{Inputs: ids, Targets: make([]int, len(ids)), T: 16, Indices: make([]int, 2)})
	if err == nil || !strings.Contains(err.Error(), "token id 300") || !strings.Contains(err.Error(), "vocabulary size 256") {
		t.Errorf("id out of range: err = %v", err)
	}
	long := make([]int, 20)
	_, err = j.step(context.Background(), harness.Step{}, data.Batch{Inputs: long, Targets: long, T: 20, Indices: make([]int, 1)})
	if err == nil || !strings.Contains(err.Error(), "sequence length 20 is longer than the block size 16") {
		t.Errorf("too long: err = %v", err)
	}
}

func TestConfigMistakes(t *testing.T) {
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.NEmbd, c.NHead = 30, 4 }, "NEmbd 30 is not a multiple of NHead 4"},
		{func(c *Config) { c.Dropout = 1 }, "Dropout 1"},
		{func(c *Config) { c.LR = math.NaN() }, "LR NaN"},
		{func(c *Config) { c.Beta2 = new(1.0) }, "Beta2 1"},
		{func(c *Config) { c.GradClip = new(-1.0) }, "GradClip -1"},
		{func(c *Config) { c.WarmupSteps = new(-1) }, "WarmupSteps -1"},
		{func(c *Config) { c.Precision = "fp16" }, `harness: Precision "fp16"`},
		{func(c *Config) { c.Resume = true }, "Resume needs Save"},
		{func(c *Config) { c.BatchSize = -1 }, "BatchSize -1"},
	} {
		cfg := tiny()
		c.edit(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}
