package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/nn/models"
)

// valLosses returns the validation loss of every step's evaluation line
// ("step N: train_loss=X val_loss=Y"), by step.
func valLosses(out string) map[string]string {
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`step (\d+): train_loss=\S+ val_loss=(\S+)`).FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	return got
}

// TestShardedEvalMatchesDDP: at world 2 and 3, a GPT trained with
// --sharding full, evaluated every step on the sharded model by every
// rank, reports the validation losses DDP reports (to the 5 significant
// digits printed). Its model file, written from the units gathered one
// at a time, is the file checkpoint.Save writes for the weights it holds
// (loaded and saved again, byte for byte), and those weights are the
// sharded checkpoint's of the last step, bit for bit. The sample after
// training runs on the sharded model too.
func TestShardedEvalMatchesDDP(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(strconv.Itoa(world), func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--batch-size", "4", "--max-steps", "3", "--nproc-per-node", strconv.Itoa(world)}
			allDDP, _ := trainOK(t, gptArgs(append(args, "--save", filepath.Join(dir, "ddp.safetensors"))...)...)
			want := valLosses(allDDP)
			if len(want) != 3 {
				t.Fatalf("want 3 steps' validation losses; output:\n%s", allDDP)
			}
			save := filepath.Join(dir, "full.safetensors")
			allFull, kv := trainOK(t, gptArgs(append(args, "--sharding", "full", "--save", save, "--sample", "12")...)...)
			if kv["sharding"] != "full" {
				t.Fatalf("summary %v: want sharding=full", kv)
			}
			if got := valLosses(allFull); !mapsEqual(got, want) {
				t.Fatalf("validation losses: full sharding's %v, DDP's %v", got, want)
			}
			if !strings.Contains(allFull, "sample:") {
				t.Fatalf("no sample after sharded training; output:\n%s", allFull)
			}

			file, err := os.ReadFile(save)
			if err != nil {
				t.Fatal(err)
			}
			m := models.GPT(models.GPTConfig{VocabSize: 256, BlockSize: 16, NLayer: 2, NHead: 2, NEmbd: 16, Bias: true})
			if err := checkpoint.Load(save, m); err != nil {
				t.Fatal(err)
			}
			again := filepath.Join(dir, "again.safetensors")
			if err := checkpoint.Save(again, m); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(again); !bytes.Equal(file, b) {
				t.Fatalf("the model file (%d bytes) is not what Save writes for its weights (%d bytes)", len(file), len(b))
			}
			saved, _, err := checkpoint.ReadTensorsFile(save)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string][]float32{}
			for _, e := range saved {
				byName[e.Name] = e.Tensor.Data()
			}
			cons, _, err := checkpoint.Consolidate(harness.ShardedDir(save))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range cons {
				if !checkpoint.IsModelKey(e.Name) {
					continue
				}
				n++
				if !slices.Equal(byName[e.Name], e.Tensor.Data()) {
					t.Fatalf("%s: the model file's values differ from the sharded checkpoint's", e.Name)
				}
			}
			if n == 0 {
				t.Fatal("the sharded checkpoint holds no model tensor")
			}
		})
	}
}
