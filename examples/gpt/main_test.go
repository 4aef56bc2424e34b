package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn/models"
)

// workers lets the test binary run the example's main as real processes.
var workers = testproc.Workers{
	"main": func() int {
		if args := os.Getenv("EXAMPLE_ARGS"); args != "" {
			os.Args = append(os.Args[:1], strings.Fields(args)...)
		}
		main() // exits 1 on failure
		return 0
	},
}

func TestMain(m *testing.M) {
	testproc.Dispatch(workers)
	os.Exit(m.Run())
}

var tinyArgs = []string{"-n-layer", "1", "-n-head", "2", "-n-embd", "16", "-block-size", "16", "-batch-size", "4",
	"-max-steps", "20", "-warmup-steps", "2", "-lr", "1e-2", "-eval-every", "10", "-sample", "30"}

func TestAlone(t *testing.T) {
	save := filepath.Join(t.TempDir(), "gpt.safetensors")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := testproc.Command(ctx, t, "main", append(tinyArgs, "-save", save)...)
	var env []string
	for _, kv := range cmd.Env {
		if k, _, _ := strings.Cut(kv, "="); k != "WORLD_SIZE" && k != "RANK" {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderrOf(err))
	}
	if !strings.HasPrefix(string(out), "model=gpt world=1 steps=20 train_loss=") {
		t.Fatalf("stdout %q", out)
	}
	m := models.GPT(models.GPTConfig{VocabSize: 256, BlockSize: 16, NLayer: 1, NHead: 2, NEmbd: 16, Bias: true})
	if err := checkpoint.Load(save, m); err != nil {
		t.Fatal(err)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

func TestTwoRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	ranks := testproc.Start(t, "main", 2, testproc.Options{Env: []string{"GOTRAIN_TOKEN=example", "GOTRAIN_RUN_ID=" + t.Name(),
		"EXAMPLE_ARGS=" + strings.Join(tinyArgs, " ")}})
	ranks.WaitOK()
	out := ranks.Procs()[0].Text()
	// Rank 0, on no terminal and under no launcher, prints plain progress
	// lines: an evaluation interval's line names the run's step of its
	// total, never an epoch.
	if !strings.Contains(out, "model=gpt world=2 steps=20 train_loss=") || !strings.Contains(out, "eval 2/2 step 20/20: train_loss ") ||
		!strings.Contains(out, " val_loss ") || strings.Contains(out, "epoch") || !strings.Contains(out, "sample:") {
		t.Fatalf("rank 0:\n%s", out)
	}
}
