package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// ckptHub joins in-process ranks for SaveSharded: every collective is an
// exchange of each rank's words.
type ckptHub struct {
	n         int
	mu        sync.Mutex
	cond      *sync.Cond
	slots     [][]int64
	arrived   int
	gen       int
	published [][]int64
}

type ckptRank struct {
	h    *ckptHub
	rank int
}

func (h *ckptHub) exchange(rank int, v []int64) [][]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.slots[rank] = slices.Clone(v)
	h.arrived++
	gen := h.gen
	if h.arrived == h.n {
		h.published, h.arrived = slices.Clone(h.slots), 0
		h.gen++
		h.cond.Broadcast()
	}
	for h.gen == gen {
		h.cond.Wait()
	}
	return h.published
}

func (g ckptRank) Rank() int { return g.rank }
func (g ckptRank) Size() int { return g.h.n }
func (g ckptRank) Broadcast(_ context.Context, buf any, root int) error {
	copy(buf.([]int64), g.h.exchange(g.rank, buf.([]int64))[root])
	return nil
}
func (g ckptRank) AllGather(_ context.Context, dst, src any) error {
	for r, part := range g.h.exchange(g.rank, src.([]int64)) {
		copy(dst.([]int64)[r*len(part):], part)
	}
	return nil
}

// cliModel is the model the checkpoint command tests save.
func cliModel(seed float32) nn.Module {
	m := nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 2))
	for i, p := range nn.Parameters(m) {
		d := p.Data()
		for j := range d {
			d[j] = seed*float32(i+1) - float32(j)/7
		}
	}
	return m
}

// saveShardedModel saves m's state dict and a made-up optimizer state as
// FULL_SHARD pieces of world ranks in dir, at step 12.
func saveShardedModel(t *testing.T, dir string, m nn.Module, world int) {
	t.Helper()
	sd := nn.StateDict(m)
	sd = append(sd, nn.Named{Name: "optim.state.0.weight.exp_avg", Tensor: tensor.New([]float32{1, 2, 3, 4}, 2, 2)})
	h := &ckptHub{n: world, slots: make([][]int64, world)}
	h.cond = sync.NewCond(&h.mu)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ps []checkpoint.Piece
			for _, e := range sd {
				d := e.Tensor.Data()
				chunk := (len(d) + world - 1) / world
				off := min(r*chunk, len(d))
				ps = append(ps, checkpoint.Piece{Key: e.Name, GlobalShape: e.Tensor.Shape(), Offset: off, Data: d[off:min(off+chunk, len(d))]})
			}
			st := checkpoint.ShardedState{Step: 12, Strategy: "FULL_SHARD", Pieces: ps}
			errs[r] = checkpoint.SaveSharded(context.Background(), ckptRank{h, r}, dir, st)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestCheckpointConsolidate writes a sharded save's model as the file
// checkpoint.Save writes for the model, which loads into it.
func TestCheckpointConsolidate(t *testing.T) {
	dir := t.TempDir()
	m := cliModel(0.5)
	saveShardedModel(t, filepath.Join(dir, "ckpt"), m, 3)
	out := filepath.Join(dir, "model.safetensors")
	all, stdout, code := runGotrain(t, 60*time.Second, "checkpoint", "consolidate", filepath.Join(dir, "ckpt"), "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, all)
	}
	if want := "wrote " + out + ": 4 tensors, 32 values\n"; stdout != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}
	ref := filepath.Join(dir, "ref.safetensors")
	if err := checkpoint.Save(ref, m); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(ref)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("%s differs from the model file Save writes", out)
	}
	m2 := cliModel(9)
	if err := checkpoint.Load(out, m2); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointInspect lists a sharded save, then reports a corrupt
// shard and exits 1; and lists a single model file's tensors.
func TestCheckpointInspect(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	saveShardedModel(t, ckpt, cliModel(0.25), 2)
	all, stdout, code := runGotrain(t, 60*time.Second, "checkpoint", "inspect", ckpt)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, all)
	}
	for _, want := range []string{
		"save        " + filepath.Join(ckpt, "step-00000012") + "\n",
		"step        12\n", "strategy    FULL_SHARD\n", "world size  2\n",
		"tensors     5 (4 model, 1 optimizer), 36 values\n",
		"coverage    every tensor fully covered\n",
		"FILE                              RANK  BYTES",
	} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("inspect output lacks %q:\n%s", want, stdout)
		}
	}
	for r := range 2 {
		line := lineWith(stdout, checkpoint.ShardFileName(r, 2))
		if f := strings.Fields(line); len(f) != 5 || f[1] != string(rune('0'+r)) || f[3] != "5" || f[4] != "ok" {
			t.Fatalf("shard %d's line: %q", r, line)
		}
	}

	shard := filepath.Join(ckpt, "step-00000012", checkpoint.ShardFileName(1, 2))
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	all, stdout, code = runGotrain(t, 60*time.Second, "checkpoint", "inspect", ckpt)
	if code != 1 || !strings.Contains(lineWith(stdout, checkpoint.ShardFileName(1, 2)), "corrupt: CRC-32C") ||
		!strings.Contains(all, "cannot be loaded: 1 shard file(s) missing or corrupt here") {
		t.Fatalf("exit %d after corrupting shard 1:\n%s", code, all)
	}
	all, _, code = runGotrain(t, 60*time.Second, "checkpoint", "consolidate", ckpt, "-o", filepath.Join(dir, "m.safetensors"))
	if code != 1 || !strings.Contains(all, shard+", written by rank 1, is corrupt") || strings.Count(strings.TrimSpace(all), "\n") != 0 {
		t.Fatalf("consolidate of a corrupt save: exit %d:\n%s", code, all)
	}

	model := filepath.Join(dir, "one.safetensors")
	if err := checkpoint.Save(model, cliModel(1)); err != nil {
		t.Fatal(err)
	}
	all, stdout, code = runGotrain(t, 60*time.Second, "checkpoint", "inspect", model)
	if code != 0 || !strings.Contains(stdout, "kind       safetensors model file\n") ||
		!strings.Contains(stdout, "0.weight  F32    [5 3]\n") || !strings.Contains(stdout, "tensors    4\n") {
		t.Fatalf("inspect of a model file: exit %d:\n%s", code, all)
	}
}

// lineWith returns the first line of s containing sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestCheckpointRefusals: a bad command line is one line and exit 2; a
// directory without a checkpoint one line and exit 1.
func TestCheckpointRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"checkpoint", "consolidate", dir}, 2, "--output: the model file to write (-o model.safetensors) is required"},
		{[]string{"checkpoint", "consolidate", dir, "-o", filepath.Join(dir, "m.pt")}, 2, "must name a .safetensors file"},
		{[]string{"checkpoint", "consolidate"}, 2, "want one argument, the checkpoint directory (got 0)"},
		{[]string{"checkpoint", "inspect", dir, dir}, 2, "want one argument, the checkpoint directory or file (got 2)"},
		{[]string{"checkpoint", "inspect", dir}, 1, filepath.Join(dir, "latest") + ": no such file or directory"},
		{[]string{"checkpoint", "consolidate", dir, "-o", filepath.Join(dir, "m.safetensors")}, 1, "no such file or directory"},
		{[]string{"checkpoint", "inspect", filepath.Join(dir, "nothing")}, 1, "nothing: no such file or directory"},
	} {
		all, _, code := runGotrain(t, 60*time.Second, c.args...)
		if code != c.code || !strings.Contains(all, c.want) || strings.Count(strings.TrimSpace(all), "\n") != 0 {
			t.Errorf("gotrain %s: exit %d, want %d and one line saying %q:\n%s", strings.Join(c.args, " "), code, c.code, c.want, all)
		}
	}
}
