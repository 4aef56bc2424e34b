package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/nn/models"
)

// resumableGPT are the flags of a tiny GPT whose learning rate is
// constant (no warm-up, --min-lr = --lr), so that a run cut short and
// resumed with a longer --max-steps follows the uninterrupted run, and
// whose train loss is printed every step.
var resumableGPT = []string{"train", "gpt", "--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
	"--eval-every", "1", "--eval-batches", "2", "--warmup-steps", "0", "--lr", "1e-2", "--min-lr", "1e-2", "--progress=false"}

// trainLosses returns the train loss of every step's evaluation line
// ("step N: train_loss=X"), by step.
func trainLosses(out string) map[string]string {
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`step (\d+): train_loss=(\S+)`).FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	return got
}

// trainOK runs gotrain with args and returns its combined output and
// summary, failing the test unless it succeeds.
func trainOK(t *testing.T, args ...string) (string, map[string]string) {
	t.Helper()
	all, stdout, code := runGotrain(t, 120*time.Second, args...)
	if code != 0 {
		t.Fatalf("gotrain %s: exit code %d; output:\n%s", strings.Join(args, " "), code, all)
	}
	return all, summary(t, stdout)
}

func gptArgs(extra ...string) []string {
	return append(append([]string(nil), resumableGPT...), extra...)
}

// TestShardingResumesAnywhere: a GPT trained 2 steps with --sharding full
// on 4 workers resumes under DDP on 2 workers and under full sharding on
// 3, and both continue with the losses of an uninterrupted 4-step run
// (the global batch is 12 windows throughout: 4×3, 2×6, 3×4, and the
// sampler deals a global step the same windows at any world size). The
// losses are compared as printed, to 4 decimals: the float32 sums of the
// gradient reductions run in another order at each world size, so the
// weights agree to rounding, not bit for bit. The uninterrupted sharded
// run trains as DDP does, its summary names the strategy and each
// rank's peak RSS, and the model file it saves loads into the GPT.
func TestShardingResumesAnywhere(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"full", "cut"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	full := filepath.Join(dir, "full", "gpt.safetensors")
	allFull, kv := trainOK(t, gptArgs("--batch-size", "3", "--max-steps", "4", "--sharding", "full", "--nproc-per-node", "4", "--save", full)...)
	if kv["sharding"] != "full" || kv["world"] != "4" || len(strings.Split(kv["peak_rss_mib_ranks"], "/")) != 4 {
		t.Fatalf("summary %v: want sharding=full world=4 and 4 ranks' peak_rss_mib_ranks", kv)
	}
	for _, v := range strings.Split(kv["peak_rss_mib_ranks"], "/") {
		if v == "0" || v == "" {
			t.Fatalf("summary %v: a rank's peak RSS is %q", kv, v)
		}
	}
	want := trainLosses(allFull)
	if len(want) != 4 {
		t.Fatalf("want 4 steps' losses; output:\n%s", allFull)
	}
	m := models.GPT(models.GPTConfig{VocabSize: 256, BlockSize: 16, NLayer: 2, NHead: 2, NEmbd: 16, Bias: true})
	if err := checkpoint.Load(full, m); err != nil {
		t.Fatal(err)
	}
	allDDP, _ := trainOK(t, gptArgs("--batch-size", "3", "--max-steps", "4", "--nproc-per-node", "4")...)
	if got := trainLosses(allDDP); !mapsEqual(got, want) {
		t.Fatalf("DDP's losses %v, full sharding's %v", got, want)
	}

	cut := filepath.Join(dir, "cut", "gpt.safetensors")
	trainOK(t, gptArgs("--batch-size", "3", "--max-steps", "2", "--sharding", "full", "--nproc-per-node", "4", "--save", cut)...)
	if _, err := os.Stat(filepath.Join(harness.ShardedDir(cut), checkpoint.LatestFile)); err != nil {
		t.Fatalf("no sharded checkpoint: %v", err)
	}
	if _, err := os.Stat(checkpoint.TrainingPath(cut)); err == nil {
		t.Fatalf("a sharded run wrote the DDP checkpoint %s", checkpoint.TrainingPath(cut))
	}
	cut3 := filepath.Join(dir, "cut3", "gpt.safetensors")
	if err := os.CopyFS(filepath.Dir(cut3), os.DirFS(filepath.Dir(cut))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, save string
		args       []string
	}{
		{"ddp-2", cut, []string{"--batch-size", "6", "--nproc-per-node", "2"}},
		{"full-3", cut3, []string{"--batch-size", "4", "--sharding", "full", "--nproc-per-node", "3"}},
	} {
		all, kv := trainOK(t, gptArgs(append(tc.args, "--max-steps", "4", "--save", tc.save, "--resume")...)...)
		if len(linesWith(all, "msg=resumed", "step=2")) == 0 || kv["steps"] != "2" {
			t.Fatalf("%s: did not resume at step 2 (summary %v); output:\n%s", tc.name, kv, all)
		}
		got := trainLosses(all)
		if len(got) != 2 || got["3"] != want["3"] || got["4"] != want["4"] {
			t.Fatalf("%s: resumed losses %v, uninterrupted %v", tc.name, got, want)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestShardingBadFlags: the data-parallel flags that do not fit are
// refused in one line naming both.
func TestShardingBadFlags(t *testing.T) {
	gpt := func(args ...string) []string { return append([]string{"train", "gpt"}, args...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{gpt("--sharding", "zero3"), "gotrain: --sharding zero3: must be none, zero1, zero2, full or hybrid"},
		{gpt("--sharding", "full", "--comm-hook", "bf16"), "gotrain: --sharding full and --comm-hook bf16:"},
		{gpt("--sharding", "zero2", "--diloco", "5"), "gotrain: --sharding zero2 and --diloco:"},
		{gpt("--local-sgd", "2", "--diloco", "3"), "gotrain: --local-sgd and --diloco: choose one"},
		{gpt("--diloco", "4", "--comm-hook", "powersgd"), "gotrain: --diloco and --comm-hook powersgd:"},
		{gpt("--diloco", "0"), "gotrain: --diloco 0: must be at least 1"},
		{gpt("--local-sgd", "-1"), "gotrain: --local-sgd -1: must be at least 1"},
		{gpt("--diloco-bf16"), "gotrain: --diloco-bf16: needs --diloco"},
		{gpt("--local-sgd", "4", "--diloco-outer-lr", "0.5"), "gotrain: --diloco-outer-lr: needs --diloco"},
		{gpt("--diloco-fragments", "2"), "gotrain: --diloco-fragments: needs --diloco or --local-sgd"},
		{gpt("--diloco", "4", "--diloco-outer-momentum", "1"), "gotrain: --diloco-outer-momentum 1: must be at least 0 and below 1"},
		{gpt("--diloco", "4", "--diloco-outer-lr", "0"), "gotrain: --diloco-outer-lr 0: must be positive"},
		{gpt("--diloco", "4", "--diloco-fragments", "0"), "gotrain: --diloco-fragments 0: must be at least 1"},
	} {
		all, _, code := runGotrain(t, 30*time.Second, tc.args...)
		out := strings.TrimSuffix(all, "\n")
		switch {
		case code != 2:
			t.Errorf("gotrain %s: exit code %d, want 2; output:\n%s", strings.Join(tc.args, " "), code, all)
		case strings.Contains(out, "\n"):
			t.Errorf("gotrain %s: want one line, got:\n%s", strings.Join(tc.args, " "), all)
		case !strings.HasPrefix(out, tc.want):
			t.Errorf("gotrain %s: %q does not begin %q", strings.Join(tc.args, " "), out, tc.want)
		}
	}
}
