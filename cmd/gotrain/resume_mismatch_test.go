package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
)

// Resuming an MLP's checkpoint into the CNN names the model's keys that
// do not match, in one short line, not the scheduler that differs with
// it; the checkpoint is left as it was.
func TestResumeOtherModelSaysTheModelDiffers(t *testing.T) {
	save := filepath.Join(t.TempDir(), "m.safetensors")
	all, _, code := runGotrain(t, 60*time.Second, "train", "mnist", "--model", "mlp", "--max-steps", "2",
		"--progress=false", "--save", save)
	if code != 0 {
		t.Fatalf("mlp: exit code %d; output:\n%s", code, all)
	}
	before, err := os.ReadFile(checkpoint.TrainingPath(save))
	if err != nil {
		t.Fatal(err)
	}
	all, _, code = runGotrain(t, 60*time.Second, "train", "mnist", "--model", "cnn", "--max-steps", "2",
		"--progress=false", "--save", save, "--resume")
	if code == 0 {
		t.Fatalf("cnn resumed the mlp's checkpoint; output:\n%s", all)
	}
	var line string
	for l := range strings.Lines(all) {
		if strings.Contains(l, "does not match") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "missing keys") || !strings.Contains(line, "unexpected keys") ||
		strings.Contains(all, "cheduler") || len(line) > 600 {
		t.Fatalf("want one short line saying the model does not match, naming keys; output:\n%s", all)
	}
	if after, err := os.ReadFile(checkpoint.TrainingPath(save)); err != nil || string(after) != string(before) {
		t.Fatalf("the checkpoint changed (err %v)", err)
	}
}
