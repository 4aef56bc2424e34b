package fsdp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Dispatch(testproc.Workers{
		"fsdp":   func() int { return testproc.ExitCode(fsdpWorker()) },
		"gptmem": func() int { return testproc.ExitCode(gptMemWorker()) },
	})
	os.Exit(m.Run())
}

// procSteps is the training length of the multi-process test.
const procSteps = 20

// procStrategies are trained, after DDP, by every worker process.
var procStrategies = []ShardingStrategy{ShardGradOp, FullShard}

// savedResult is a result as a worker writes it.
type savedResult struct {
	Losses []float32
	State  map[string][]float32
}

// fsdpWorker is one rank: it trains the GPT workload under DDP and under
// each of procStrategies over a real process group and writes the
// results to $OUT/rank<r>-<label>.json.
func fsdpWorker() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://", Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	defer g.Destroy()
	save := func(label string, r result) error {
		b, err := json.Marshal(savedResult{Losses: r.losses, State: r.state})
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(os.Getenv("OUT"), fmt.Sprintf("rank%d-%s.json", g.Rank(), label)), b, 0o644)
	}
	ref, err := trainDDP(ctx, g, gptWorkload(), procSteps, 1)
	if err != nil {
		return fmt.Errorf("ddp: %w", err)
	}
	if err := save("ddp", ref); err != nil {
		return err
	}
	for _, s := range procStrategies {
		r, err := trainFSDP(ctx, g, gptWorkload(), procSteps, 1, Strategy(s))
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		if err := save(s.String(), r); err != nil {
			return err
		}
	}
	return nil
}

// TestMultiProcessMatchesDDP runs 3 ranks as separate processes over TCP:
// ShardGradOp and FullShard give DDP's losses and weights there too.
func TestMultiProcessMatchesDDP(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const world = 3
	out := t.TempDir()
	ranks := testproc.Start(t, "fsdp", world, testproc.Options{Env: []string{"GOTRAIN_TOKEN=fsdp-test", "OUT=" + out}})
	ranks.WaitOK()
	load := func(rank int, label string) result {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank%d-%s.json", rank, label)))
		if err != nil {
			t.Fatal(err)
		}
		var s savedResult
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return result{losses: s.Losses, state: s.State}
	}
	for r := range world {
		ref := load(r, "ddp")
		for _, s := range procStrategies {
			compare(t, fmt.Sprintf("%s rank %d (processes)", s, r), ref, load(r, s.String()))
		}
	}
}
