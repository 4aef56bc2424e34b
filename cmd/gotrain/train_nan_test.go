package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// At --lr 1e30 the MLP's first step blows its weights up and every later
// loss is NaN (or infinite).

// By default a NaN loss ends the job: a non-zero exit and one line naming
// the step, the epoch and the rank, last.
func TestTrainNaNStops(t *testing.T) {
	all, _, code := runGotrain(t, 60*time.Second, "train", "mnist", "--lr", "1e30", "--max-steps", "5", "--progress=false")
	want := regexp.MustCompile(`^gotrain: loss is (NaN|\+Inf) at step 2 \(epoch 1\) on rank 0; lower --lr or use --on-nan skip\|warn$`)
	lines := strings.Split(strings.TrimSpace(all), "\n")
	if code != 1 || !want.MatchString(lines[len(lines)-1]) || strings.Contains(all, "model=") {
		t.Fatalf("exit %d; output:\n%s\nwant exit 1, no summary and last %s", code, all, want)
	}
}

// --on-nan warn trains on: the first NaN is logged once, the epoch's loss
// is NaN on the progress line, the summary counts the steps, the metrics
// rows hold null, and gotrain plot draws them.
func TestTrainOnNaNWarn(t *testing.T) {
	dir := t.TempDir()
	rows, png := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "m.png")
	all, stdout, code := runGotrain(t, 60*time.Second, "train", "mnist", "--lr", "1e30", "--max-steps", "5", "--on-nan", "warn", "--metrics", rows)
	if code != 0 {
		t.Fatalf("exit %d; output:\n%s", code, all)
	}
	if kv := summary(t, stdout); kv["nan_steps"] != "4" || kv["skipped_steps"] != "" {
		t.Errorf("summary %v: want nan_steps=4 and no skipped_steps", kv)
	}
	if n := strings.Count(all, "level=WARN"); n != 1 || !regexp.MustCompile(`msg="loss is (NaN|\+Inf) at step 2 \(epoch 1\) on rank 0; training goes on`).MatchString(all) {
		t.Errorf("%d warnings; output:\n%s\nwant one, for step 2", n, all)
	}
	if !regexp.MustCompile(`epoch 1/1: 5 steps train_loss NaN `).MatchString(all) {
		t.Errorf("output:\n%s\nwant the epoch's line with train_loss NaN", all)
	}
	b, err := os.ReadFile(rows)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 5 || strings.Contains(lines[0], `"loss":null`) {
		t.Fatalf("metrics rows:\n%s\nwant 5, the first with a loss", b)
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, `"loss":null`) {
			t.Errorf("row %s: want \"loss\":null", l)
		}
	}
	if all, _, code := runGotrain(t, 60*time.Second, "plot", rows, "-o", png); code != 0 {
		t.Fatalf("gotrain plot: exit %d: %s", code, all)
	}
	if _, err := os.Stat(png); err != nil {
		t.Fatal(err)
	}
}

// --on-nan skip on two workers drops the NaN steps' updates on both and
// trains on: one warning (rank 0's, for the job), the epoch's loss that
// of the one step that trained, the skipped steps in the summary.
func TestTrainOnNaNSkipTwoWorkers(t *testing.T) {
	all, stdout, code := runGotrain(t, 60*time.Second, "train", "mnist", "--nproc-per-node", "2", "--lr", "1e30", "--max-steps", "5",
		"--on-nan", "skip", "--progress=false")
	if code != 0 {
		t.Fatalf("exit %d; output:\n%s", code, all)
	}
	if kv := summary(t, stdout); kv["world"] != "2" || kv["nan_steps"] != "4" || kv["skipped_steps"] != "4" {
		t.Errorf("summary %v: want world=2 nan_steps=4 skipped_steps=4", kv)
	}
	if n := strings.Count(all, "level=WARN"); n != 1 || !strings.Contains(all, "the step's update is dropped on every rank and training goes on (on-nan skip)") {
		t.Errorf("%d warnings; output:\n%s\nwant rank 0's one", n, all)
	}
	if !regexp.MustCompile(`\[rank0\]: epoch 1: train_loss=2\.\d{4} `).MatchString(all) {
		t.Errorf("output:\n%s\nwant the first step's loss as the epoch's", all)
	}
}

func TestTrainOnNaNRefusesUnknown(t *testing.T) {
	all, _, code := runGotrain(t, 30*time.Second, "train", "mnist", "--on-nan", "ignore")
	if code != 2 || strings.TrimSpace(all) != "gotrain: --on-nan ignore: must be stop, skip or warn" {
		t.Fatalf("exit %d: %q", code, all)
	}
}

// The GPT at --lr 1e6 without clipping diverges within its few steps:
// the job ends with the line, not a summary of train_loss=NaN and exit 0.
func TestTrainGPTNaNStops(t *testing.T) {
	args := append(append([]string{}, tinyGPT...), "--lr", "1e6", "--grad-clip", "0", "--progress=false") // the last --lr counts
	all, _, code := runGotrain(t, 60*time.Second, args...)
	want := regexp.MustCompile(`^gotrain: (loss|gradient norm) is (NaN|[+-]Inf) at step \d+ \(epoch 1\) on rank 0; lower --lr or use --on-nan skip\|warn$`)
	lines := strings.Split(strings.TrimSpace(all), "\n")
	if code != 1 || !want.MatchString(lines[len(lines)-1]) || strings.Contains(all, "model=gpt") {
		t.Fatalf("exit %d; output:\n%s\nwant exit 1 and last %s", code, all, want)
	}
}
