package main

import (
	"path/filepath"
	"testing"
)

// TestDiLoCoAndLocalSGDResume: the GPT trains on 2 workers with
// --diloco 3 and with --local-sgd 3, the summary names the sync and its
// bytes, and a run cut at step 6 and resumed to step 12 continues with
// the uninterrupted run's losses exactly: the checkpoint holds every
// rank's replica and inner optimizer state, and θ_global with the outer
// momentum.
func TestDiLoCoAndLocalSGDResume(t *testing.T) {
	for _, tc := range []struct {
		name, sync string
		args       []string
	}{
		{"diloco", "diloco:3", []string{"--diloco", "3"}},
		{"localsgd", "localsgd:3", []string{"--local-sgd", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := gptArgs(append([]string{"--batch-size", "4", "--nproc-per-node", "2"}, tc.args...)...)
			all, kv := trainOK(t, append(base, "--max-steps", "12")...)
			if kv["sync"] != tc.sync || num(t, kv, "sync_sent_mib") <= 0 || num(t, kv, "sync_bytes_per_token") <= 0 {
				t.Fatalf("summary %v: want sync=%s and the bytes it sent", kv, tc.sync)
			}
			want := trainLosses(all)
			if len(want) != 12 || !(num(t, kv, "train_loss") < 5) {
				t.Fatalf("losses %v, summary %v: want 12 steps training", want, kv)
			}
			save := filepath.Join(t.TempDir(), "gpt.safetensors")
			trainOK(t, append(base, "--max-steps", "6", "--save", save)...)
			all, kv = trainOK(t, append(base, "--max-steps", "12", "--save", save, "--resume")...)
			got := trainLosses(all)
			if kv["steps"] != "6" || len(got) != 6 {
				t.Fatalf("resumed: summary %v, losses %v; output:\n%s", kv, got, all)
			}
			for step, l := range got {
				if want[step] != l {
					t.Fatalf("resumed losses %v, uninterrupted %v", got, want)
				}
			}
		})
	}
}
