package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
)

// fakeGroup is an in-process Group: ranks are goroutines and collectives
// pass copies over channels, root 0 only (all ResumeFrom uses).
type fakeGroup struct {
	rank int
	net  *fakeNet
}

type fakeNet struct {
	size   int
	bcast  []chan []int64        // to each rank from rank 0
	gather []chan fakeGatherPart // to each rank from every other
}

type fakeGatherPart struct {
	from int
	vals []int64
}

func newFakeGroups(size int) []Group {
	n := &fakeNet{size: size}
	gs := make([]Group, size)
	for r := range size {
		n.bcast = append(n.bcast, make(chan []int64, 16))
		n.gather = append(n.gather, make(chan fakeGatherPart, size))
		gs[r] = &fakeGroup{rank: r, net: n}
	}
	return gs
}

func (g *fakeGroup) Rank() int { return g.rank }
func (g *fakeGroup) Size() int { return g.net.size }

func (g *fakeGroup) Broadcast(ctx context.Context, buf any, root int) error {
	b := buf.([]int64)
	if root != 0 {
		panic("fakeGroup: root must be 0")
	}
	if g.rank == 0 {
		for r := 1; r < g.net.size; r++ {
			g.net.bcast[r] <- slices.Clone(b)
		}
		return nil
	}
	got := <-g.net.bcast[g.rank]
	if len(got) != len(b) {
		return fmt.Errorf("fakeGroup: broadcast of %d elements into %d", len(got), len(b))
	}
	copy(b, got)
	return nil
}

func (g *fakeGroup) AllGather(ctx context.Context, dst, src any) error {
	d, s := dst.([]int64), src.([]int64)
	for r := range g.net.size {
		if r != g.rank {
			g.net.gather[r] <- fakeGatherPart{g.rank, slices.Clone(s)}
		}
	}
	copy(d[g.rank*len(s):], s)
	for range g.net.size - 1 {
		p := <-g.net.gather[g.rank]
		copy(d[p.from*len(s):], p.vals)
	}
	return nil
}

// resumeOutcome is one rank's ResumeFrom result.
type resumeOutcome struct {
	resumed bool
	err     error
}

// resumeAll runs ResumeFrom on every rank at once, rank r reading
// paths[r] into sts[r].
func resumeAll(t *testing.T, paths []string, sts []*TrainingState) []resumeOutcome {
	t.Helper()
	gs := newFakeGroups(len(paths))
	out := make([]resumeOutcome, len(paths))
	var wg sync.WaitGroup
	for r := range paths {
		wg.Go(func() {
			resumed, err := ResumeFrom(context.Background(), gs[r], paths[r], sts[r])
			out[r] = resumeOutcome{resumed, err}
		})
	}
	wg.Wait()
	return out
}

// newTrainState is a model, an SGD with momentum and a schedule, all from
// seed.
func newTrainState(seed float32, extra *extras) *TrainingState {
	m := trainedModel(seed)
	opt := optim.NewSGD(nn.Parameters(m), 0.1, optim.Momentum(0.9))
	st := &TrainingState{Model: m, Optimizer: opt, Scheduler: optim.NewStepLR(opt, 2, 0.5)}
	if extra != nil {
		st.Extra = extra
	}
	return st
}

// saveTrained trains a state a few steps and saves it at path.
func saveTrained(t *testing.T, path string) *TrainingState {
	t.Helper()
	st := newTrainState(0.3, nil)
	trainSteps(t, st.Model, st.Optimizer, st.Scheduler, 3)
	st.Epoch, st.Step, st.Extra = 2, 3, extras{SamplerEpoch: 2, BestAcc: 0.5}
	if err := SaveTraining(path, *st); err != nil {
		t.Fatal(err)
	}
	return st
}

// Only rank 0 has the checkpoint (no shared file system): every rank
// resumes from it, with the same model, optimizer, schedule and Extra.
func TestResumeFromRankZeroOnly(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	paths := []string{filepath.Join(dirs[0], "m.safetensors"), filepath.Join(dirs[1], "m.safetensors"), filepath.Join(dirs[2], "m.safetensors")}
	saved := saveTrained(t, paths[0])
	// Rank 2 holds a stale checkpoint of its own: rank 0's still wins.
	stale := newTrainState(9, nil)
	if err := SaveTraining(paths[2], *stale); err != nil {
		t.Fatal(err)
	}

	exs := make([]extras, 3)
	sts := []*TrainingState{newTrainState(1, &exs[0]), newTrainState(2, &exs[1]), newTrainState(3, &exs[2])}
	for r, o := range resumeAll(t, paths, sts) {
		if o.err != nil || !o.resumed {
			t.Fatalf("rank %d: resumed %v, err %v", r, o.resumed, o.err)
		}
	}
	for r, st := range sts {
		sameState(t, st.Model, saved.Model)
		if st.Epoch != 2 || st.Step != 3 || exs[r] != (extras{2, 0.5}) {
			t.Fatalf("rank %d: epoch %d step %d extra %+v", r, st.Epoch, st.Step, exs[r])
		}
		// The same next steps from the same optimizer state and schedule.
		trainSteps(t, st.Model, st.Optimizer, st.Scheduler, 2)
	}
	trainSteps(t, saved.Model, saved.Optimizer, saved.Scheduler, 2)
	for r, st := range sts {
		sameState(t, st.Model, saved.Model)
		if st.Optimizer.LR() != saved.Optimizer.LR() {
			t.Fatalf("rank %d: lr %v, want %v", r, st.Optimizer.LR(), saved.Optimizer.LR())
		}
	}
}

func TestResumeFromNothing(t *testing.T) {
	paths := []string{filepath.Join(t.TempDir(), "m.safetensors"), filepath.Join(t.TempDir(), "m.safetensors")}
	sts := []*TrainingState{newTrainState(1, nil), newTrainState(1, nil)}
	for r, o := range resumeAll(t, paths, sts) {
		if o.err != nil || o.resumed {
			t.Fatalf("rank %d: resumed %v, err %v; want a fresh start", r, o.resumed, o.err)
		}
		sameState(t, sts[r].Model, trainedModel(1))
	}
	// A group of one, and no group, are LoadTraining.
	for _, g := range []Group{nil, newFakeGroups(1)[0]} {
		if resumed, err := ResumeFrom(context.Background(), g, paths[0], newTrainState(1, nil)); resumed || err != nil {
			t.Fatalf("group %v: resumed %v, err %v", g, resumed, err)
		}
	}
	saved := saveTrained(t, paths[0])
	st := newTrainState(1, &extras{})
	if resumed, err := ResumeFrom(context.Background(), nil, paths[0], st); !resumed || err != nil {
		t.Fatalf("alone: resumed %v, err %v", resumed, err)
	}
	sameState(t, st.Model, saved.Model)
}

// A model file without its sidecar is an error on every rank naming both
// files, and the model file is left as it was.
func TestResumeFromMissingSidecar(t *testing.T) {
	paths := []string{filepath.Join(t.TempDir(), "m.safetensors"), filepath.Join(t.TempDir(), "m.safetensors")}
	saveTrained(t, paths[0])
	side := TrainingPath(paths[0])
	if err := os.Remove(side); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	sts := []*TrainingState{newTrainState(1, nil), newTrainState(1, nil)}
	for r, o := range resumeAll(t, paths, sts) {
		if o.err == nil || o.resumed || !strings.Contains(o.err.Error(), paths[0]) || !strings.Contains(o.err.Error(), side) {
			t.Fatalf("rank %d: resumed %v, err %v; want an error naming %s and %s", r, o.resumed, o.err, paths[0], side)
		}
		sameState(t, sts[r].Model, trainedModel(1))
	}
	if err := LoadTraining(paths[0], newTrainState(1, nil)); err == nil || errors.Is(err, os.ErrNotExist) ||
		!strings.Contains(err.Error(), paths[0]) || !strings.Contains(err.Error(), side) {
		t.Fatalf("LoadTraining: err = %v; want one naming both files, not ErrNotExist", err)
	}
	if after, err := os.ReadFile(paths[0]); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("model file changed (err %v)", err)
	}
}

// A rank that cannot load rank 0's state fails the resume on every rank,
// and the ranks that had loaded it are put back as they were.
func TestResumeFromNeverPartial(t *testing.T) {
	paths := []string{filepath.Join(t.TempDir(), "m.safetensors"), filepath.Join(t.TempDir(), "m.safetensors")}
	saveTrained(t, paths[0])
	ex := extras{SamplerEpoch: 7}
	good := newTrainState(1, &ex)
	bad := newTrainState(1, nil)
	bad.Optimizer = optim.NewAdam(nn.Parameters(bad.Model), 0.1) // not the SGD saved
	bad.Scheduler = optim.NewStepLR(bad.Optimizer, 2, 0.5)
	out := resumeAll(t, paths, []*TrainingState{good, bad})
	if err := out[1].err; !errors.Is(err, optim.ErrStateDict) || !strings.Contains(err.Error(), "rank 0's "+TrainingPath(paths[0])) {
		t.Fatalf("rank 1: err = %v; want the optimizer's error naming rank 0's file", err)
	}
	if err := out[0].err; err == nil || out[0].resumed || !strings.Contains(err.Error(), "rank(s) [1] could not load") {
		t.Fatalf("rank 0: resumed %v, err %v; want an error naming rank 1", out[0].resumed, err)
	}
	sameState(t, good.Model, trainedModel(1))
	if good.Epoch != 0 || good.Step != 0 || ex != (extras{SamplerEpoch: 7}) || good.Optimizer.LR() != 0.1 || len(good.Optimizer.StateDict().Tensors) != 0 {
		t.Fatalf("rank 0 kept part of the resume: epoch %d step %d extra %+v lr %v", good.Epoch, good.Step, ex, good.Optimizer.LR())
	}
}

// tensorSpan returns where tensor name's bytes are in the safetensors
// file raw.
func tensorSpan(t *testing.T, raw []byte, name string) (int, int) {
	t.Helper()
	n := int(binary.LittleEndian.Uint64(raw))
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	var info tensorInfo
	if err := json.Unmarshal(hdr[name], &info); err != nil {
		t.Fatalf("tensor %s: %v", name, err)
	}
	return 8 + n + int(info.DataOffsets[0]), 8 + n + int(info.DataOffsets[1])
}

// A flipped byte in a tensor's data, in the model file or the sidecar, is
// an error naming the file and the tensor, on every rank of a resume.
func TestChecksumCatchesFlippedByte(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	saveTrained(t, path)
	flip := func(file, tensor string) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		b, e := tensorSpan(t, raw, tensor)
		raw[(b+e)/2] ^= 0x10
		if err := os.WriteFile(file, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flip(path, "1.weight")
	err := Load(path, trainedModel(1))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `tensor "1.weight": checksum mismatch`) {
		t.Fatalf("Load: err = %v; want ErrCorrupt naming %s and tensor 1.weight", err, path)
	}

	side := TrainingPath(path)
	flip(side, "state.0.momentum_buffer")
	st := newTrainState(1, nil)
	err = LoadTraining(path, st)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), side) || !strings.Contains(err.Error(), `tensor "state.0.momentum_buffer"`) {
		t.Fatalf("LoadTraining: err = %v; want ErrCorrupt naming %s and the tensor", err, side)
	}
	sameState(t, st.Model, trainedModel(1))
	out := resumeAll(t, []string{path, filepath.Join(t.TempDir(), "m.safetensors")}, []*TrainingState{newTrainState(1, nil), newTrainState(1, nil)})
	for r, o := range out {
		if o.err == nil || !strings.Contains(o.err.Error(), side) || !strings.Contains(o.err.Error(), "state.0.momentum_buffer") {
			t.Fatalf("rank %d: err = %v; want one naming %s and the tensor", r, o.err, side)
		}
	}
}

// A NaN or an infinity is an error naming the file and the tensor unless
// AllowNonFinite is given.
func TestNonFiniteRefusedUnlessAllowed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	m := trainedModel(1)
	for _, e := range nn.StateDict(m) {
		if e.Name == "4.bias" {
			e.Tensor.Data()[3] = float32(math.NaN())
		}
		if e.Name == "2.running_var" {
			e.Tensor.Data()[5] = float32(math.Inf(-1))
		}
	}
	if err := Save(path, m); err != nil {
		t.Fatal(err)
	}
	dst := trainedModel(2)
	err := Load(path, dst)
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `tensor "2.running_var" holds -Inf at element 5`) {
		t.Fatalf("err = %v; want ErrNonFinite naming %s and the first bad tensor", err, path)
	}
	sameState(t, dst, trainedModel(2))
	if err := Load(path, dst, AllowNonFinite()); err != nil {
		t.Fatalf("with AllowNonFinite: %v", err)
	}
	for _, e := range nn.StateDict(dst) {
		if e.Name == "4.bias" && !math.IsNaN(float64(e.Tensor.Data()[3])) {
			t.Fatalf("4.bias[3] = %v, want the NaN saved", e.Tensor.Data()[3])
		}
	}
}
