package main

import (
	"testing"
)

// TestActivationCheckpointingFlag: `gotrain train gpt
// --activation-checkpointing` trains as without it, alone with dropout
// and under --sharding full on 2 workers: every step's printed losses
// are the same (the recomputation is exact, dropout masks replayed).
func TestActivationCheckpointingFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"alone-dropout", []string{"--batch-size", "3", "--max-steps", "3", "--dropout", "0.2"}},
		{"full-2", []string{"--batch-size", "3", "--max-steps", "3", "--sharding", "full", "--nproc-per-node", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain, _ := trainOK(t, gptArgs(tc.args...)...)
			ckpt, kv := trainOK(t, gptArgs(append(tc.args, "--activation-checkpointing")...)...)
			want, got := trainLosses(plain), trainLosses(ckpt)
			if len(want) != 3 || !mapsEqual(got, want) {
				t.Fatalf("losses with --activation-checkpointing %v, without %v", got, want)
			}
			if kv["train_loss"] == "" {
				t.Fatalf("summary %v has no train_loss", kv)
			}
		})
	}
}
