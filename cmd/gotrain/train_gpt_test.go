package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/jobs/gptjob"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/tensor"
)

// tinyGPT are the flags of a GPT small enough for a CLI test.
var tinyGPT = []string{"train", "gpt", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
	"--batch-size", "4", "--max-steps", "10", "--eval-every", "5", "--eval-batches", "2", "--warmup-steps", "2", "--lr", "1e-2"}

func TestTrainGPT(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		world string
	}{
		{"single-process", nil, "1"},
		{"two-workers", []string{"--nproc-per-node", "2"}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			save := filepath.Join(t.TempDir(), "gpt.safetensors")
			args := append(append(append([]string(nil), tinyGPT...), "--progress=false", "--sample", "30", "--save", save), tc.args...)
			all, stdout, code := runGotrain(t, 60*time.Second, args...)
			if code != 0 {
				t.Fatalf("exit code %d; output:\n%s", code, all)
			}
			kv := summary(t, stdout)
			if kv["model"] != "gpt" || kv["world"] != tc.world || kv["steps"] != "10" || kv["precision"] != "fp32" {
				t.Fatalf("summary %v: want model=gpt world=%s steps=10 precision=fp32", kv, tc.world)
			}
			// From ln 256 = 5.55 at the start.
			for _, key := range []string{"train_loss", "val_loss"} {
				if l := num(t, kv, key); !(l > 1 && l < 5.4) {
					t.Fatalf("%s=%v after 10 steps", key, l)
				}
			}
			if num(t, kv, "tokens_per_s") <= 0 || num(t, kv, "peak_rss_mib") <= 0 {
				t.Fatalf("summary %v", kv)
			}
			if !strings.Contains(stdout, "sample:\n") || len(linesWith(all, "step 5: train_loss=")) != 1 || len(linesWith(all, "step 10: train_loss=")) != 1 {
				t.Fatalf("want a sample and an evaluation line at steps 5 and 10; output:\n%s", all)
			}
			// The saved model is a GPT of the flags' shape.
			m := models.GPT(models.GPTConfig{VocabSize: 256, BlockSize: 16, NLayer: 1, NHead: 2, NEmbd: 16, Bias: true})
			if err := checkpoint.Load(save, m); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTrainGPTPrecision: --precision bf16-emulated reaches the job, in
// this process and in each worker, which logs that bf16 is emulated, and
// the summary names it.
func TestTrainGPTPrecision(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		world string
	}{
		{"single-process", nil, "1"},
		{"two-workers", []string{"--nproc-per-node", "2"}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string(nil), tinyGPT...), "--progress=false", "--precision", "bf16-emulated"), tc.args...)
			all, stdout, code := runGotrain(t, 60*time.Second, args...)
			if code != 0 {
				t.Fatalf("exit code %d; output:\n%s", code, all)
			}
			kv := summary(t, stdout)
			if kv["world"] != tc.world || kv["steps"] != "10" || kv["precision"] != "bf16-emulated" {
				t.Fatalf("summary %v: want world=%s steps=10 precision=bf16-emulated", kv, tc.world)
			}
			if l := num(t, kv, "val_loss"); !(l > 1 && l < 5.4) {
				t.Fatalf("val_loss=%v after 10 steps", l)
			}
			if n := len(linesWith(all, "bf16 emulated")); strconv.Itoa(n) != tc.world {
				t.Fatalf("want the notice that bf16 is emulated (once per worker); output:\n%s", all)
			}
		})
	}
}

// TestTrainGPTBadInput: every mistake is one line from the launching
// process and exit status 2, before any worker starts.
func TestTrainGPTBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := write("empty.txt", nil)
	latin1 := write("latin1.txt", []byte("caf\xe9"+strings.Repeat(" au lait", 20)))
	short := write("short.txt", []byte("package main\n"))
	notGPT := write("weights.safetensors", []byte("not a safetensors file"))
	gpt := func(args ...string) []string { return append([]string{"train", "gpt"}, args...) }
	cases := []struct {
		args []string
		want string
	}{
		{gpt("--data", empty), "gotrain: --data " + empty + ": " + empty + " is empty"},
		{gpt("--data", latin1), "is not UTF-8 text (invalid byte 0xe9 at offset 3)"},
		{gpt("--data", short), "(13 bytes) is too short for the block size 128"},
		{gpt("--data", filepath.Join(dir, "missing.txt")), "no such file"},
		{gpt("--n-embd", "100", "--n-head", "3"), "gotrain: --n-embd 100: must be a multiple of --n-head 3"},
		{gpt("--n-layer", "0"), "gotrain: --n-layer 0: must be at least 1"},
		{gpt("--dropout", "1"), "gotrain: --dropout 1: must be at least 0 and below 1"},
		{gpt("--lr", "0"), "gotrain: --lr 0: must be a number greater than 0"},
		{gpt("--min-lr", "0.1"), "gotrain: --min-lr 0.1: must not exceed --lr 0.001"},
		{gpt("--beta2", "1"), "gotrain: --beta2 1: must be at least 0 and below 1"},
		{gpt("--grad-clip", "-1"), "gotrain: --grad-clip -1: must be a finite number of at least 0"},
		{gpt("--eval-every", "0"), "gotrain: --eval-every 0: must be at least 1"},
		{gpt("--sample", "-3"), "gotrain: --sample -3: must be at least 0"},
		{gpt("--init", notGPT), "gotrain: --init " + notGPT + ": does not hold this GPT's weights"},
		{gpt("--resume"), "gotrain: --resume: needs --save"},
		{gpt("--save-every", "5"), "gotrain: --save-every 5: needs --save"},
		{gpt("--log-dir", dir), "gotrain: --log-dir " + dir + ": applies only with --nproc-per-node > 1"},
		{gpt("--nproc-per-node", "2", "--block-size", "0"), "gotrain: --block-size 0: must be at least 1"},
		{gpt("--precision", "fp16"), "gotrain: --precision fp16: must be fp32, bf16 or bf16-emulated"},
		{gpt("--precision", "BF16"), "gotrain: --precision BF16: must be fp32, bf16 or bf16-emulated"},
		{gpt("--nproc-per-node", "2", "--precision", ""), `gotrain: --precision "": must be fp32, bf16 or bf16-emulated`},
	}
	if !tensor.BF16Native() {
		// Refused, naming the CPU feature bf16 needs, not silently
		// emulated; with two workers too, from the launching process.
		want := "gotrain: --precision bf16: " + kernels.BF16Missing() + " (--precision bf16-emulated runs the same numerics in software, slower than fp32)"
		if !strings.Contains(want, "AMX_BF16") {
			t.Fatalf("the refusal %q does not name AMX_BF16", want)
		}
		for _, args := range [][]string{gpt("--precision", "bf16"), gpt("--nproc-per-node", "2", "--precision", "bf16")} {
			cases = append(cases, struct {
				args []string
				want string
			}{args, want})
		}
	}
	for _, tc := range cases {
		all, _, code := runGotrain(t, 30*time.Second, tc.args...)
		out := strings.TrimSuffix(all, "\n")
		switch {
		case code != 2:
			t.Errorf("gotrain %s: exit code %d, want 2; output:\n%s", strings.Join(tc.args, " "), code, all)
		case strings.Contains(out, "\n"):
			t.Errorf("gotrain %s: want one line, got:\n%s", strings.Join(tc.args, " "), all)
		case !strings.HasPrefix(out, "gotrain: ") || !strings.Contains(out, tc.want):
			t.Errorf("gotrain %s: %q does not contain %q", strings.Join(tc.args, " "), out, tc.want)
		}
	}
}

// TestTrainGPTExplicitZeros: 0 on the command line means none, not the
// job's default, and the flags left out keep the job's defaults.
func TestTrainGPTExplicitZeros(t *testing.T) {
	var cfg gptjob.Config
	f := pflag.NewFlagSet("train gpt", pflag.ContinueOnError)
	cfg.RegisterFlags(f)
	if err := f.Parse([]string{"--weight-decay", "0", "--grad-clip", "0", "--warmup-steps", "0", "--beta1", "0", "--temperature", "0"}); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]*float64{"weight-decay": cfg.WeightDecay, "grad-clip": cfg.GradClip, "beta1": cfg.Beta1, "temperature": cfg.Temperature} {
		if v == nil || *v != 0 {
			t.Errorf("--%s 0 not passed as 0: %v", name, v)
		}
	}
	if cfg.WarmupSteps == nil || *cfg.WarmupSteps != 0 {
		t.Errorf("--warmup-steps 0 not passed as 0: %v", cfg.WarmupSteps)
	}
	if cfg.Beta2 != nil || cfg.MinLR != nil || cfg.LR != 1e-3 || cfg.NLayer != 4 || cfg.BatchSize != 32 {
		t.Fatalf("defaults changed: %+v", cfg)
	}
}
