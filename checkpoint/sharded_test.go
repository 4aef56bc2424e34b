package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
)

// fullTensor is a tensor of the tests' model, whole.
type fullTensor struct {
	shape []int
	data  []float32
}

// testTensors is a model's and its optimizer's state with shapes that
// split unevenly into 2, 3 and 4, a one-element tensor, and values with
// awkward bit patterns (negative zero, a subnormal).
func testTensors(seed uint64) map[string]fullTensor {
	rng := rand.New(rand.NewPCG(seed, 7))
	shapes := []struct {
		key   string
		shape []int
	}{
		{"block.conv.weight", []int{2, 2, 2}},
		{"fc1.bias", []int{5}},
		{"fc1.weight", []int{5, 3}},
		{"fc2.bias", []int{1}},
		{"fc2.weight", []int{2, 5}},
		{"optim.state.fc1.bias.exp_avg", []int{5}},
		{"optim.state.fc1.weight.exp_avg", []int{5, 3}},
	}
	out := map[string]fullTensor{}
	for _, s := range shapes {
		n, _ := numelOf(s.shape)
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
		out[s.key] = fullTensor{shape: s.shape, data: d}
	}
	w := out["fc1.weight"].data
	w[0] = float32(math.Copysign(0, -1))
	w[1] = math.SmallestNonzeroFloat32
	return out
}

func sortedKeys(full map[string]fullTensor) []string {
	var keys []string
	for k := range full {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fsdpRange is FULL_SHARD's slice of n elements for rank of world: the
// padded chunk ceil(n/world) elements long, cut at the tensor's end.
func fsdpRange(n, world, rank int) (off, end int) {
	chunk := (n + world - 1) / world
	off = min(rank*chunk, n)
	return off, min(off+chunk, n)
}

// fsdpPieces are rank's pieces of full as FULL_SHARD holds them.
func fsdpPieces(full map[string]fullTensor, world, rank int) []Piece {
	var ps []Piece
	for _, k := range sortedKeys(full) {
		t := full[k]
		off, end := fsdpRange(len(t.data), world, rank)
		p := Piece{Key: k, GlobalShape: t.shape, Offset: off, Data: slices.Clone(t.data[off:end])}
		if off == end {
			// All padding: the slice starts past the tensor's end.
			p.Offset = rank * ((len(t.data) + world - 1) / world)
		}
		ps = append(ps, p)
	}
	return ps
}

// wholePieces are every tensor of full, as each DDP replica holds them.
func wholePieces(full map[string]fullTensor) []Piece {
	var ps []Piece
	for _, k := range sortedKeys(full) {
		ps = append(ps, Piece{Key: k, GlobalShape: full[k].shape, Data: slices.Clone(full[k].data)})
	}
	return ps
}

func fsdpRequests(full map[string]fullTensor, world, rank int) []PieceRequest {
	var qs []PieceRequest
	for _, k := range sortedKeys(full) {
		off, end := fsdpRange(len(full[k].data), world, rank)
		qs = append(qs, PieceRequest{Key: k, GlobalShape: full[k].shape, Offset: off, Length: end - off})
	}
	return qs
}

func wholeRequests(full map[string]fullTensor) []PieceRequest {
	var qs []PieceRequest
	for _, k := range sortedKeys(full) {
		qs = append(qs, PieceRequest{Key: k, GlobalShape: full[k].shape, Length: len(full[k].data)})
	}
	return qs
}

// sameBits fails unless each piece holds exactly full's bits there.
func sameBits(t *testing.T, rank int, got []Piece, want []PieceRequest, full map[string]fullTensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("rank %d: %d pieces for %d requests", rank, len(got), len(want))
	}
	for i, p := range got {
		q := want[i]
		if p.Key != q.Key || p.Offset != q.Offset || len(p.Data) != q.Length || !slices.Equal(p.GlobalShape, q.GlobalShape) {
			t.Fatalf("rank %d: piece %d is %s@%d×%d %v, asked for %s@%d×%d %v", rank, i, p.Key, p.Offset, len(p.Data), p.GlobalShape, q.Key, q.Offset, q.Length, q.GlobalShape)
		}
		src := full[p.Key].data[p.Offset : p.Offset+len(p.Data)]
		for j := range src {
			if math.Float32bits(src[j]) != math.Float32bits(p.Data[j]) {
				t.Fatalf("rank %d: %s element %d is %v (bits %08x), saved %v (bits %08x)", rank, p.Key, p.Offset+j,
					p.Data[j], math.Float32bits(p.Data[j]), src[j], math.Float32bits(src[j]))
			}
		}
	}
}

// saveAll runs SaveSharded on every rank of a new group of world ranks,
// rank r saving st(r) into dirs(r), and returns each rank's error.
func saveAll(world int, dirs func(r int) string, st func(r int) ShardedState) []error {
	_, errs := onRanks(ShardHubGroups(world), func(g Group) (struct{}, error) {
		return struct{}{}, SaveSharded(context.Background(), g, dirs(g.Rank()), st(g.Rank()))
	})
	return errs
}

// loadAll runs LoadSharded on every rank of a new group of world ranks.
func loadAll(world int, dirs func(r int) string, want func(r int) []PieceRequest) ([]*ShardedLoad, []error) {
	return onRanks(ShardHubGroups(world), func(g Group) (*ShardedLoad, error) {
		return LoadSharded(context.Background(), g, dirs(g.Rank()), want(g.Rank()))
	})
}

func noErrors(t *testing.T, what string, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

// sameError fails unless every rank failed with the same message, which
// holds every one of parts, and returns it.
func sameError(t *testing.T, what string, errs []error, parts ...string) string {
	t.Helper()
	for r, err := range errs {
		if err == nil {
			t.Fatalf("%s: rank %d succeeded", what, r)
		}
		if err.Error() != errs[0].Error() {
			t.Fatalf("%s: rank %d says %q, rank 0 %q", what, r, err, errs[0])
		}
	}
	msg := errs[0].Error()
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Fatalf("%s: error %q does not say %q", what, msg, p)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Fatalf("%s: error is more than one line: %q", what, msg)
	}
	return msg
}

func fsdpState(full map[string]fullTensor, world int) func(r int) ShardedState {
	return func(r int) ShardedState {
		return ShardedState{
			Step: 40, Strategy: "FULL_SHARD", Pieces: fsdpPieces(full, world, r),
			Extra:     map[string]string{"scheduler": `{"last_epoch":3}`},
			RankExtra: map[string]string{"rng": fmt.Sprintf("seed-%d", r)},
		}
	}
}

// TestShardedReshard saves FULL_SHARD pieces at world 4 and loads them
// whole at world 2 (as DDP holds them) and in thirds at world 3, bit for
// bit, with a shared directory and with one directory per host (no
// shared file system: the index and shards 0-1 on host A, shards 2-3 on
// host B).
func TestShardedReshard(t *testing.T) {
	full := testTensors(1)
	for _, layout := range []string{"shared", "per-host"} {
		t.Run(layout, func(t *testing.T) {
			base := t.TempDir()
			host := func(r int) string {
				if layout == "shared" || r < 2 {
					return filepath.Join(base, "A", "ckpt")
				}
				return filepath.Join(base, "B", "ckpt")
			}
			noErrors(t, "save", saveAll(4, host, fsdpState(full, 4)))
			if layout == "per-host" {
				if _, err := os.Stat(filepath.Join(base, "B", "ckpt", "step-00000040", ShardFileName(3, 4))); err != nil {
					t.Fatalf("rank 3's shard is not on its host: %v", err)
				}
				if _, err := os.Stat(filepath.Join(base, "A", "ckpt", "step-00000040", ShardFileName(3, 4))); err == nil {
					t.Fatal("rank 3's shard is on host A")
				}
			}

			// World 2, whole tensors; rank 1 on host B.
			loads, errs := loadAll(2, func(r int) string { return host(2 * r) }, func(int) []PieceRequest { return wholeRequests(full) })
			noErrors(t, "load at world 2", errs)
			for r, l := range loads {
				sameBits(t, r, l.Pieces, wholeRequests(full), full)
				if l.Step != 40 || l.Strategy != "FULL_SHARD" || l.WorldSize != 4 || l.Extra["scheduler"] != `{"last_epoch":3}` ||
					len(l.RankExtra) != 4 || l.RankExtra[3]["rng"] != "seed-3" {
					t.Fatalf("rank %d: loaded step %d strategy %q world %d extra %v rank extra %v", r, l.Step, l.Strategy, l.WorldSize, l.Extra, l.RankExtra)
				}
			}

			// World 3, thirds; ranks 0-1 on host A, rank 2 on host B.
			loads, errs = loadAll(3, func(r int) string { return host(min(2*r, 3)) }, func(r int) []PieceRequest { return fsdpRequests(full, 3, r) })
			noErrors(t, "load at world 3", errs)
			for r, l := range loads {
				sameBits(t, r, l.Pieces, fsdpRequests(full, 3, r), full)
			}
		})
	}
}

// TestShardedReplicas saves DDP replicas (every rank holds every tensor):
// only rank 0 writes a shard, and the save loads into FULL_SHARD slices.
func TestShardedReplicas(t *testing.T) {
	full := testTensors(2)
	dir := t.TempDir()
	noErrors(t, "save", saveAll(3, func(int) string { return dir }, func(int) ShardedState {
		return ShardedState{Step: 7, Strategy: "DDP", Pieces: wholePieces(full)}
	}))
	names, err := filepath.Glob(filepath.Join(dir, "step-00000007", "shard-*"))
	if err != nil || len(names) != 1 || filepath.Base(names[0]) != ShardFileName(0, 3) {
		t.Fatalf("shard files %v (%v), want rank 0's alone", names, err)
	}
	loads, errs := loadAll(4, func(int) string { return dir }, func(r int) []PieceRequest { return fsdpRequests(full, 4, r) })
	noErrors(t, "load", errs)
	for r, l := range loads {
		sameBits(t, r, l.Pieces, fsdpRequests(full, 4, r), full)
	}
}

// TestShardedSaveRefusesBadPieces: pieces that leave a range uncovered,
// replicas that differ and shapes that disagree are errors on every
// rank, and nothing is committed.
func TestShardedSaveRefusesBadPieces(t *testing.T) {
	full := testTensors(3)
	cases := []struct {
		name  string
		st    func(r int) ShardedState
		parts []string
	}{
		{"uncovered", func(r int) ShardedState {
			ps := fsdpPieces(full, 2, r)
			if r == 1 {
				ps = slices.DeleteFunc(ps, func(p Piece) bool { return p.Key == "fc1.weight" })
			}
			return ShardedState{Pieces: ps}
		}, []string{`tensor "fc1.weight": elements [8, 15) are held by no rank`}},
		{"replicas differ", func(r int) ShardedState {
			ps := wholePieces(full)
			if r == 1 {
				ps[0].Data[2] += 1
			}
			return ShardedState{Pieces: ps}
		}, []string{"ranks 0 and 1 hold different values", ps0Key(full)}},
		{"shapes differ", func(r int) ShardedState {
			ps := fsdpPieces(full, 2, r)
			if r == 1 {
				ps[0].GlobalShape = []int{99}
			}
			return ShardedState{Pieces: ps}
		}, []string{"rank 0 gives shape", "rank 1 [99]"}},
		{"outside", func(r int) ShardedState {
			ps := fsdpPieces(full, 2, r)
			if r == 1 {
				ps[0].Offset = 100
			}
			return ShardedState{Pieces: ps}
		}, []string{"rank 1: tensor", "is outside its"}},
		{"steps differ", func(r int) ShardedState {
			return ShardedState{Step: int64(5 + r), Pieces: fsdpPieces(full, 2, r)}
		}, []string{"rank 1 saves step 6, rank 0 step 5"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			sameError(t, "save", saveAll(2, func(int) string { return dir }, c.st), c.parts...)
			if _, err := os.Stat(filepath.Join(dir, LatestFile)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a refused save committed: %v", err)
			}
		})
	}
}

func ps0Key(full map[string]fullTensor) string { return sortedKeys(full)[0] }

// TestShardedRankFailure: a rank that cannot write its shard makes every
// rank return one error naming it; latest still names the previous save.
func TestShardedRankFailure(t *testing.T) {
	full := testTensors(4)
	base := t.TempDir()
	good := filepath.Join(base, "ckpt")
	noErrors(t, "first save", saveAll(4, func(int) string { return good }, fsdpState(full, 4)))
	// Rank 2's directory lies under a regular file, so it cannot be made.
	blocker := filepath.Join(base, "blocker")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next := func(r int) ShardedState { s := fsdpState(testTensors(5), 4)(r); s.Step = 50; return s }
	errs := saveAll(4, func(r int) string {
		if r == 2 {
			return filepath.Join(blocker, "ckpt")
		}
		return good
	}, next)
	// Each rank names its own directory, then the same failure.
	for r, err := range errs {
		errs[r] = errors.New(strings.Replace(fmt.Sprint(err), filepath.Join(blocker, "ckpt")+":", good+":", 1))
	}
	sameError(t, "save", errs, "rank 2: mkdir "+blocker+": not a directory", "not committed (latest is unchanged)")
	loads, errs := loadAll(2, func(int) string { return good }, func(int) []PieceRequest { return wholeRequests(full) })
	noErrors(t, "load", errs)
	if loads[0].Step != 40 {
		t.Fatalf("loaded step %d, want the previous save's 40", loads[0].Step)
	}
	sameBits(t, 0, loads[0].Pieces, wholeRequests(full), full)
}

// TestShardedCrashBeforeIndex: a save that stops after every shard is
// written but before the index leaves the previous save as the one that
// loads; the next save of the same step does not touch the save latest
// names.
func TestShardedCrashBeforeIndex(t *testing.T) {
	old, next := testTensors(6), testTensors(7)
	dir := t.TempDir()
	same := func(int) string { return dir }
	noErrors(t, "first save", saveAll(4, same, fsdpState(old, 4)))

	crash := errors.New("killed")
	shardedBeforeIndex = func(string) error { return crash }
	errs := saveAll(4, same, func(r int) ShardedState { s := fsdpState(next, 4)(r); s.Step = 41; return s })
	shardedBeforeIndex = nil
	sameError(t, "interrupted save", errs, "killed")
	if _, err := os.Stat(filepath.Join(dir, "step-00000041", ShardFileName(3, 4))); err != nil {
		t.Fatalf("the interrupted save wrote no shard: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "step-00000041", IndexFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the interrupted save wrote its index: %v", err)
	}
	loads, errs := loadAll(3, same, func(r int) []PieceRequest { return fsdpRequests(old, 3, r) })
	noErrors(t, "load after the interrupted save", errs)
	for r, l := range loads {
		if l.Step != 40 {
			t.Fatalf("rank %d loaded step %d, want 40", r, l.Step)
		}
		sameBits(t, r, l.Pieces, fsdpRequests(old, 3, r), old)
	}

	// Saving step 40 again goes beside the save latest names, then
	// replaces it as the newest.
	noErrors(t, "save of the same step", saveAll(2, same, fsdpState(next, 2)))
	latest, err := os.ReadFile(filepath.Join(dir, LatestFile))
	if err != nil || strings.TrimSpace(string(latest)) != "step-00000040.1" {
		t.Fatalf("latest = %q (%v), want step-00000040.1", latest, err)
	}
	loads, errs = loadAll(1, same, func(int) []PieceRequest { return wholeRequests(next) })
	noErrors(t, "load of the newest", errs)
	sameBits(t, 0, loads[0].Pieces, wholeRequests(next), next)
	// The save it replaced is whole.
	loads, errs = loadAll(1, func(int) string { return filepath.Join(dir, "step-00000040") }, func(int) []PieceRequest { return wholeRequests(old) })
	noErrors(t, "load of the replaced save", errs)
	sameBits(t, 0, loads[0].Pieces, wholeRequests(old), old)
}

// TestShardedMissingShard: a shard that no rank has is one error, the
// same on every rank, naming the file and the rank that wrote it.
func TestShardedMissingShard(t *testing.T) {
	full := testTensors(8)
	dir := t.TempDir()
	same := func(int) string { return dir }
	noErrors(t, "save", saveAll(4, same, fsdpState(full, 4)))
	lost := filepath.Join(dir, "step-00000040", ShardFileName(2, 4))
	if err := os.Remove(lost); err != nil {
		t.Fatal(err)
	}
	_, errs := loadAll(3, same, func(r int) []PieceRequest { return fsdpRequests(full, 3, r) })
	sameError(t, "load", errs, lost, "written by rank 2", "is on no rank")
}

// TestShardedCorruptShard: one flipped byte in a shard's data is one
// error, the same on every rank, naming the file and the rank that wrote
// it, whether the ranks read it themselves or from the rank that has it.
func TestShardedCorruptShard(t *testing.T) {
	full := testTensors(9)
	for _, layout := range []string{"shared", "per-host"} {
		t.Run(layout, func(t *testing.T) {
			base := t.TempDir()
			host := func(r int) string {
				if layout == "shared" || r < 2 {
					return filepath.Join(base, "A")
				}
				return filepath.Join(base, "B")
			}
			noErrors(t, "save", saveAll(4, host, fsdpState(full, 4)))
			bad := filepath.Join(host(1), "step-00000040", ShardFileName(1, 4))
			b, err := os.ReadFile(bad)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-3] ^= 0x10
			if err := os.WriteFile(bad, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, errs := loadAll(3, func(r int) string { return host(min(2*r, 3)) }, func(r int) []PieceRequest { return fsdpRequests(full, 3, r) })
			sameError(t, "load", errs, bad, "written by rank 1", "corrupt", "CRC-32C")
		})
	}
}

// TestShardedWrongModel: loading a checkpoint of another model is an
// error, the same on every rank, listing the missing, unexpected and
// mis-shaped keys.
func TestShardedWrongModel(t *testing.T) {
	full := testTensors(10)
	dir := t.TempDir()
	same := func(int) string { return dir }
	noErrors(t, "save", saveAll(2, same, fsdpState(full, 2)))
	want := func(r int) []PieceRequest {
		qs := fsdpRequests(full, 2, r)
		for i := range qs {
			switch qs[i].Key {
			case "fc2.bias":
				qs[i].Key = "head.bias"
			case "fc1.bias":
				qs[i].GlobalShape = []int{6}
			}
		}
		return qs
	}
	_, errs := loadAll(2, same, want)
	sameError(t, "load", errs, "does not match", "missing keys (asked for, not in the checkpoint): head.bias",
		"unexpected keys (in the checkpoint, asked for by no rank): fc2.bias", "fc1.bias: checkpoint [5], model [6]")

	_, errs = loadAll(2, same, func(r int) []PieceRequest {
		qs := fsdpRequests(full, 2, r)
		if r == 1 {
			qs[2].Offset = 14
		}
		return qs
	})
	sameError(t, "load of a range past the end", errs, `rank 1: request for tensor "fc1.weight": range [14, 21) is outside its 15 elements`)
}

// TestShardedNothingSaved: a directory without a save is fs.ErrNotExist
// on every rank, so a job can start afresh.
func TestShardedNothingSaved(t *testing.T) {
	dir := t.TempDir()
	_, errs := loadAll(2, func(int) string { return dir }, func(int) []PieceRequest { return nil })
	for r, err := range errs {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("rank %d: %v, want fs.ErrNotExist", r, err)
		}
	}
}

// TestShardedConsolidate: Consolidate returns the full tensors, and
// ConsolidateModel writes the model's tensors as the very file Save
// writes for the model, integer buffers as I64, which Load loads.
func TestShardedConsolidate(t *testing.T) {
	src := trainedModel(0.25)
	full := map[string]fullTensor{}
	dtypes := map[string]DType{}
	for _, e := range modelEntries(src) {
		full[e.Name] = fullTensor{shape: e.Tensor.Shape(), data: e.Tensor.Data()}
		if e.DType == I64 {
			dtypes[e.Name] = I64
		}
	}
	full["optim.state.fc.weight.exp_avg"] = fullTensor{shape: []int{3, 2}, data: []float32{1, 2, 3, 4, 5, 6}}
	dir := t.TempDir()
	noErrors(t, "save", saveAll(3, func(int) string { return dir }, func(r int) ShardedState {
		return ShardedState{Step: 9, Strategy: "FULL_SHARD", Pieces: fsdpPieces(full, 3, r), DTypes: dtypes}
	}))

	entries, ix, err := Consolidate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ix.Step != 9 || ix.WorldSize != 3 || len(entries) != len(full) {
		t.Fatalf("step %d world %d, %d tensors; want 9, 3, %d", ix.Step, ix.WorldSize, len(entries), len(full))
	}
	for _, e := range entries {
		f := full[e.Name]
		if !slices.Equal(e.Tensor.Shape(), f.shape) || !slices.Equal(e.Tensor.Data(), f.data) {
			t.Fatalf("tensor %s: %v %v, saved %v %v", e.Name, e.Tensor.Shape(), e.Tensor.Data(), f.shape, f.data)
		}
		if want := dtypes[e.Name]; want != "" && e.DType != want {
			t.Fatalf("tensor %s: dtype %s, want %s", e.Name, e.DType, want)
		}
	}

	out := filepath.Join(t.TempDir(), "model.safetensors")
	if err := ConsolidateModel(dir, out); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(t.TempDir(), "ref.safetensors")
	if err := Save(ref, src); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(ref)
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Fatalf("the consolidated file (%d bytes) differs from Save's (%d bytes)", len(a), len(b))
	}
	dst := interopModel()
	if err := Load(out, dst); err != nil {
		t.Fatal(err)
	}
	sameState(t, src, dst)
}

// TestShardedConsolidateSingleFile: ConsolidateModel takes a training
// state file and writes its model, as Save does.
func TestShardedConsolidateSingleFile(t *testing.T) {
	m := trainedModel(0.75)
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := SaveTraining(path, TrainingState{Model: m, Optimizer: optim.NewAdam(nn.Parameters(m), 0.5)}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.safetensors")
	if err := ConsolidateModel(TrainingPath(path), out); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(path)
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Fatal("the model written from the training state differs from the model file")
	}
}

// TestShardedInspect reports the shards, their state and coverage.
func TestShardedInspect(t *testing.T) {
	full := testTensors(11)
	dir := t.TempDir()
	noErrors(t, "save", saveAll(4, func(int) string { return dir }, fsdpState(full, 4)))
	info, err := InspectSharded(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Index.WorldSize != 4 || info.Index.Step != 40 || len(info.Shards) != 4 || len(info.Problems) != 0 {
		t.Fatalf("inspect: %+v", info)
	}
	for i, s := range info.Shards {
		if s != "ok" {
			t.Fatalf("shard %d: %s", i, s)
		}
	}
	if err := os.Remove(filepath.Join(info.Dir, ShardFileName(1, 4))); err != nil {
		t.Fatal(err)
	}
	if info, err = InspectSharded(dir); err != nil || info.Shards[1] != "missing" {
		t.Fatalf("after removing shard 1: %v %v", info.Shards, err)
	}

	// An index whose pieces leave a hole is reported, not refused.
	ixPath := filepath.Join(info.Dir, IndexFile)
	var ix Index
	js, _ := os.ReadFile(ixPath)
	if err := json.Unmarshal(js, &ix); err != nil {
		t.Fatal(err)
	}
	ix.Shards[0].Pieces = ix.Shards[0].Pieces[1:]
	js, _ = json.Marshal(ix)
	if err := os.WriteFile(ixPath, js, 0o644); err != nil {
		t.Fatal(err)
	}
	info, err = InspectSharded(dir)
	if err != nil || len(info.Problems) != 1 || !strings.Contains(info.Problems[0], "are held by no rank") {
		t.Fatalf("problems %v (%v), want one hole", info.Problems, err)
	}
	_, errs := loadAll(1, func(int) string { return dir }, func(int) []PieceRequest { return wholeRequests(full) })
	sameError(t, "load of an index with a hole", errs, "do not cover the tensors exactly")
}

// TestShardedBrokenLatest: a latest file naming a save without an index
// is damage, not the absence of a save: one error, the same on every
// rank, naming the file.
func TestShardedBrokenLatest(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, LatestFile), []byte("step-00000099\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs := loadAll(3, func(int) string { return dir }, func(int) []PieceRequest { return nil })
	msg := sameError(t, "load", errs, filepath.Join(dir, LatestFile)+" names step-00000099, whose index cannot be read", "(on rank 0)")
	if errors.Is(errs[0], fs.ErrNotExist) {
		t.Fatalf("%q reads as no checkpoint at all", msg)
	}
	if err := os.WriteFile(filepath.Join(dir, LatestFile), []byte("../elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs = loadAll(2, func(int) string { return dir }, func(int) []PieceRequest { return nil })
	sameError(t, "load", errs, `"../elsewhere" is not the name of a save directory`)
}
