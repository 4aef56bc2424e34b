package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDDPCheckpointResumesSharded: a GPT trained 2 steps under DDP on 2
// workers (its training checkpoint beside --save) resumes with
// --sharding full on 3, each worker keeping its shards of the model and
// of AdamW's moments, and continues with the losses of an uninterrupted
// 4-step DDP run (the global batch is 12 windows throughout: 2×6, 3×4).
// A checkpoint of another model is one line listing the mismatched keys.
func TestDDPCheckpointResumesSharded(t *testing.T) {
	dir := t.TempDir()
	allWhole, _ := trainOK(t, gptArgs("--batch-size", "6", "--max-steps", "4", "--nproc-per-node", "2")...)
	want := trainLosses(allWhole)
	if len(want) != 4 {
		t.Fatalf("want 4 steps' losses; output:\n%s", allWhole)
	}
	if err := os.Mkdir(filepath.Join(dir, "cut"), 0o755); err != nil {
		t.Fatal(err)
	}
	save := filepath.Join(dir, "cut", "gpt.safetensors")
	trainOK(t, gptArgs("--batch-size", "6", "--max-steps", "2", "--nproc-per-node", "2", "--save", save)...)
	other := filepath.Join(dir, "other", "gpt.safetensors")
	if err := os.CopyFS(filepath.Dir(other), os.DirFS(filepath.Dir(save))); err != nil {
		t.Fatal(err)
	}
	all, kv := trainOK(t, gptArgs("--batch-size", "4", "--sharding", "full", "--nproc-per-node", "3", "--max-steps", "4", "--save", save, "--resume")...)
	if len(linesWith(all, "msg=resumed", "step=2")) == 0 || kv["steps"] != "2" || kv["sharding"] != "full" {
		t.Fatalf("did not resume at step 2 under sharding (summary %v); output:\n%s", kv, all)
	}
	if got := trainLosses(all); len(got) != 2 || got["3"] != want["3"] || got["4"] != want["4"] {
		t.Fatalf("resumed losses %v, uninterrupted %v", got, want)
	}

	// The same checkpoint into a GPT of three layers: its keys are named.
	args := gptArgs("--batch-size", "4", "--sharding", "full", "--nproc-per-node", "3", "--max-steps", "4", "--save", other, "--resume")
	for i, a := range args {
		if a == "--n-layer" {
			args[i+1] = "3"
		}
	}
	out, _, code := runGotrain(t, 120*time.Second, args...)
	lines := linesWith(out, "does not match the saved one")
	if code == 0 || len(lines) == 0 || !strings.Contains(lines[0], "h.2.") {
		t.Fatalf("resuming another model: exit %d, want one line naming the missing keys; output:\n%s", code, out)
	}
}
