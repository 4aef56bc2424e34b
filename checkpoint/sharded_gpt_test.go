package checkpoint_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
)

// gptFixture is nn/models' committed GPT checkpoint, which
// nn/models/testdata/check_gpt_in_torch.py loads into nanoGPT.
const gptFixture = "../nn/models/testdata/gotrain_gpt.safetensors"

// consolidatedGPT is what `gotrain checkpoint consolidate` writes for a
// sharded save of that GPT; testdata/check_sharded_gpt_in_torch.py loads
// it into nanoGPT.
const consolidatedGPT = "testdata/sharded_gpt_consolidated.safetensors"

// TestShardedGPTConsolidatesForPyTorch saves the fixture GPT as FULL_SHARD
// pieces at world 4 and consolidates it: the file is byte for byte the
// model file Save writes (nanoGPT's names, lm_head.weight and
// transformer.wte.weight both), which PyTorch loads.
func TestShardedGPTConsolidatesForPyTorch(t *testing.T) {
	m := models.GPT(models.GPTConfig{VocabSize: 37, BlockSize: 16, NLayer: 2, NHead: 2, NEmbd: 16, Bias: true})
	if err := checkpoint.Load(gptFixture, m); err != nil {
		t.Fatal(err)
	}
	const world = 4
	dir := t.TempDir()
	_, errs := checkpoint.OnRanks(checkpoint.ShardHubGroups(world), func(g checkpoint.Group) (struct{}, error) {
		var pieces []checkpoint.Piece
		for _, e := range nn.StateDict(m) {
			d := e.Tensor.Data()
			chunk := (len(d) + world - 1) / world
			off := min(g.Rank()*chunk, len(d))
			end := min(off+chunk, len(d))
			pieces = append(pieces, checkpoint.Piece{Key: e.Name, GlobalShape: e.Tensor.Shape(), Offset: off, Data: d[off:end]})
		}
		st := checkpoint.ShardedState{Step: 3, Strategy: "FULL_SHARD", Pieces: pieces}
		return struct{}{}, checkpoint.SaveSharded(context.Background(), g, dir, st)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	out := filepath.Join(t.TempDir(), "model.safetensors")
	if err := checkpoint.ConsolidateModel(dir, out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if u := flag.Lookup("update"); u != nil && u.Value.String() == "true" {
		if err := os.WriteFile(consolidatedGPT, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s; run testdata/check_sharded_gpt_in_torch.py", consolidatedGPT)
	}
	for _, ref := range []string{gptFixture, consolidatedGPT} {
		want, err := os.ReadFile(ref)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the consolidated GPT differs from %s", ref)
		}
	}
	m2 := models.GPT(m.Config)
	if err := checkpoint.Load(out, m2); err != nil {
		t.Fatal(err)
	}
}
