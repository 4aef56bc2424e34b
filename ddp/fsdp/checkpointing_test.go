package fsdp

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/tensor"
)

// checkpointedWorkload is gptWorkload with dropout 0.2 and, if on, each
// block run through nn.CallCheckpointed.
func checkpointedWorkload(on bool) workload {
	w := gptWorkload()
	w.build = func() nn.Module {
		buildMu.Lock()
		defer buildMu.Unlock()
		cfg := gptConfig
		cfg.Dropout = 0.2
		nn.SetSeed(11) // the dropout layers' generators
		m := models.GPT(cfg)
		m.ResetParameters(tensor.NewRNG(5))
		m.ActivationCheckpointing = on
		return m
	}
	return w
}

// TestActivationCheckpointingUnderFullShard: with every GPT block
// checkpointed, FullShard training at world 2 gives bitwise the losses
// and weights of FullShard without checkpointing, dropout included: the
// recomputation in backward runs on the unit gathered for its backward.
func TestActivationCheckpointingUnderFullShard(t *testing.T) {
	const world, steps = 2, 6
	plain, ckpt := make([]result, world), make([]result, world)
	runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
		var err error
		r := g.Rank()
		if plain[r], err = trainFSDP(ctx, g, checkpointedWorkload(false), steps, 1, Strategy(FullShard)); err != nil {
			return fmt.Errorf("without checkpointing: %w", err)
		}
		if ckpt[r], err = trainFSDP(ctx, g, checkpointedWorkload(true), steps, 1, Strategy(FullShard)); err != nil {
			return fmt.Errorf("with checkpointing: %w", err)
		}
		return nil
	})
	for r := range world {
		for i, want := range plain[r].losses {
			if got := ckpt[r].losses[i]; math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("rank %d step %d: loss %.9g with checkpointing, %.9g without", r, i, got, want)
			}
		}
		for k, want := range plain[r].state {
			got := ckpt[r].state[k]
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("rank %d: %s[%d] = %g with checkpointing, %g without", r, k, i, got[i], want[i])
				}
			}
		}
	}
}
