package gptjob

import (
	"strings"
	"testing"

	"github.com/gotrain/gotrain/harness"
)

// TestMemoryEstimate checks the estimate against the peak RSS of runs of
// the job (fp32, one worker, one step): 258 MiB for the defaults, 759
// MiB with --block-size 512 (no probabilities kept) and 886 MiB with
// --batch-size 128 (126 MiB of them). The estimate may be above a run's
// peak, not far below it.
func TestMemoryEstimate(t *testing.T) {
	for _, tc := range []struct {
		cfg      Config
		measured float64 // MiB
	}{{Config{}, 258}, {Config{BlockSize: 512}, 759}, {Config{BatchSize: 128}, 886}, {Config{NEmbd: 256}, 460}, {Config{NLayer: 8}, 448}} {
		got := float64(tc.cfg.MemoryEstimate().Bytes) / (1 << 20)
		if got < 0.95*tc.measured || got > 1.5*tc.measured {
			t.Errorf("%+v: estimate %.0f MiB, measured %.0f MiB", tc.cfg, got, tc.measured)
		}
	}
}

// TestMemoryEstimateNamesFlag: the flag named is the size that makes the
// estimate large.
func TestMemoryEstimateNamesFlag(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		flag string
	}{
		{Config{NEmbd: 100000, NHead: 1}, "n-embd"},
		{Config{BlockSize: 100000000}, "block-size"},
		{Config{BatchSize: 100000000}, "batch-size"},
		{Config{NLayer: 100000}, "n-layer"},
		{Config{NLayer: 100, BatchSize: 1 << 20}, "batch-size"},
	} {
		m := tc.cfg.MemoryEstimate()
		if m.Flag != tc.flag || m.Bytes < 100<<30 {
			t.Errorf("%+v: %+v, want over 100 GiB naming --%s", tc.cfg, m, tc.flag)
		}
	}
}

// TestMemoryEstimateSharding checks the estimate under sharding and
// activation checkpointing against the largest rank's peak RSS of runs
// of the GPT at width 768 (12 heads, block 256, batch 4, 4 workers, 6
// steps, AdamW): DDP 2652 MiB at 12 layers, --sharding full 1714 MiB,
// and 1127 MiB with --activation-checkpointing; 4 layers full with it
// (3 steps) 579 MiB.
// Sharding divides the state by the workers and checkpointing the
// activations, so each lowers the estimate; alone a rank shards nothing.
func TestMemoryEstimateSharding(t *testing.T) {
	gpt := func(layers int, sharding string, ac bool) Config {
		c := Config{NLayer: layers, NEmbd: 768, NHead: 12, BlockSize: 256, BatchSize: 4, ActivationCheckpointing: ac}
		c.Sharding = sharding
		return c
	}
	for _, tc := range []struct {
		cfg      Config
		measured float64 // MiB
	}{
		{gpt(12, harness.ShardNone, false), 2652},
		{gpt(12, harness.ShardFull, false), 1714},
		{gpt(12, harness.ShardFull, true), 1127},
		{gpt(4, harness.ShardFull, true), 579},
	} {
		got := float64(tc.cfg.MemoryEstimateWorld(4).Bytes) / (1 << 20)
		if got < 0.95*tc.measured || got > 1.5*tc.measured {
			t.Errorf("%s, checkpointing %v, %d layers: estimate %.0f MiB, measured %.0f MiB",
				tc.cfg.Sharding, tc.cfg.ActivationCheckpointing, tc.cfg.NLayer, got, tc.measured)
		}
	}
	est := func(c Config, world int) int64 { return c.MemoryEstimateWorld(world).Bytes }
	ddp, full, fullAC := est(gpt(24, harness.ShardNone, false), 4), est(gpt(24, harness.ShardFull, false), 4), est(gpt(24, harness.ShardFull, true), 4)
	if !(fullAC < full && full < ddp) {
		t.Errorf("24 layers on 4 workers: DDP %d, full %d, full with checkpointing %d bytes: want each below the one before", ddp, full, fullAC)
	}
	if a, b := est(gpt(24, harness.ShardFull, false), 8), full; a >= b {
		t.Errorf("full sharding over 8 workers %d bytes, over 4 %d: want less", a, b)
	}
	if a, b := est(gpt(24, harness.ShardFull, false), 1), est(gpt(24, harness.ShardNone, false), 1); a != b {
		t.Errorf("one worker: full sharding %d bytes, DDP %d: alone nothing is sharded", a, b)
	}
	if m := gpt(24, harness.ShardFull, true).MemoryEstimateWorld(4); !strings.Contains(m.Parts, "sharded full over 4") {
		t.Errorf("parts %q do not say the state is sharded", m.Parts)
	}
}
