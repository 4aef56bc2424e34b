package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/tensor"
)

// saveDesc is what a rank tells every other before a sharded save: its
// pieces (without their data) and state, or why it cannot save.
type saveDesc struct {
	Err       string            `json:"err,omitempty"`
	Dir       string            `json:"dir,omitempty"` // rank 0: the save's directory name
	Pieces    []descPiece       `json:"pieces,omitempty"`
	DTypes    map[string]DType  `json:"dtypes,omitempty"`
	Extra     map[string]string `json:"extra,omitempty"`
	RankExtra map[string]string `json:"rank_extra,omitempty"`
	Strategy  string            `json:"strategy,omitempty"`
	Step      int64             `json:"step"`
}

type descPiece struct {
	Key    string `json:"key"`
	Shape  []int  `json:"shape"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	CRC    string `json:"crc"`
	index  int    // in ShardedState.Pieces; the describing rank's only
}

// saveResult is what a rank reports after writing its shard.
type saveResult struct {
	Err   string `json:"err,omitempty"`
	Bytes int64  `json:"bytes"`
	CRC   string `json:"crc"`
}

// shardedBeforeIndex, when set, runs on rank 0 after every shard is
// written and before the index is; tests use it to stop a save there,
// as a crash would.
var shardedBeforeIndex func(stepDir string) error

// SaveSharded saves a checkpoint of every rank's pieces, each rank
// writing its own shard file, into a new directory under dir (named after
// st.Step); see Piece and ShardedState. Every rank of g must call it, as
// for any collective; a nil g is a group of one.
//
// First the ranks exchange descriptions of their pieces and check them
// together: every tensor covered exactly, with the same shape on every
// rank, replicas equal (by CRC-32C). A range several ranks hold is written
// once, by the lowest of them. Then each rank that has a range to write
// writes dir/step-N/shard-RRRRR-of-WWWWW.safetensors (atomic, checksummed,
// as Save writes files), and the ranks report the outcome to each other.
// Only when every shard is written does rank 0 write step-N/index.json and
// then point dir/latest at step-N, each atomically. A save that fails or
// stops before that leaves latest, and so what LoadSharded loads, as it
// was; a save of the step latest already names goes into step-N.1 (and
// the next into step-N again), so it never overwrites the save it
// replaces.
//
// Without a shared file system each rank's shard is on its own host in
// dir and the index on rank 0's; LoadSharded moves the bytes between
// ranks. On error every rank returns an error, the same on each, naming
// the rank(s) that failed and why.
func SaveSharded(ctx context.Context, g Group, dir string, st ShardedState) error {
	if g == nil {
		g = soloGroup{}
	}
	rank, world := g.Rank(), g.Size()
	desc := describePieces(st)
	desc.RankExtra, desc.Step = st.RankExtra, st.Step
	if rank == 0 {
		desc.Extra, desc.Strategy = st.Extra, st.Strategy
		name, err := nextSaveName(dir, st.Step)
		if err != nil && desc.Err == "" {
			desc.Err = err.Error()
		}
		desc.Dir = name
	}
	js, err := json.Marshal(desc)
	if err != nil {
		return fmt.Errorf("checkpoint: saving in %s: %w", dir, err)
	}
	raw, err := gatherBytes(ctx, g, js)
	if err != nil {
		return fmt.Errorf("checkpoint: saving in %s: exchanging the ranks' pieces: %w", dir, err)
	}
	descs := make([]saveDesc, world)
	var failed []string
	for r, b := range raw {
		if err := json.Unmarshal(b, &descs[r]); err != nil {
			failed = append(failed, fmt.Sprintf("rank %d: sent an unreadable description (another version of gotrain?): %v", r, err))
		} else if descs[r].Err != "" {
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, descs[r].Err))
		} else if descs[r].Step != descs[0].Step {
			failed = append(failed, fmt.Sprintf("rank %d saves step %d, rank 0 step %d", r, descs[r].Step, descs[0].Step))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("checkpoint: saving in %s: %s", dir, strings.Join(failed, "; "))
	}
	// The local indexes of this rank's pieces, lost in the exchange.
	for i := range descs[rank].Pieces {
		descs[rank].Pieces[i].index = desc.Pieces[i].index
	}
	ix, write, err := planSave(descs, rank)
	if err != nil {
		return fmt.Errorf("checkpoint: saving in %s: %w", dir, err)
	}
	ix.WorldSize, ix.Step = world, st.Step

	stepDir := filepath.Join(dir, descs[0].Dir)
	var res saveResult
	if len(write) > 0 || rank == 0 {
		var n int64
		var crc uint32
		err := os.MkdirAll(stepDir, 0o755)
		if err == nil && len(write) > 0 {
			pieces := make([]Piece, len(write))
			for i, k := range write {
				pieces[i] = st.Pieces[k]
			}
			n, crc, err = writeShard(filepath.Join(stepDir, ShardFileName(rank, world)), pieces, rank, world, st.Step)
		}
		if err != nil {
			res.Err = err.Error()
		}
		res.Bytes, res.CRC = n, fmt.Sprintf("%08x", crc)
	}
	js, err = json.Marshal(res)
	if err != nil {
		return fmt.Errorf("checkpoint: saving in %s: %w", dir, err)
	}
	raw, err = gatherBytes(ctx, g, js)
	if err != nil {
		return fmt.Errorf("checkpoint: saving in %s: collecting the ranks' outcomes: %w", dir, err)
	}
	results := make([]saveResult, world)
	for r, b := range raw {
		if err := json.Unmarshal(b, &results[r]); err != nil {
			failed = append(failed, fmt.Sprintf("rank %d: sent an unreadable outcome: %v", r, err))
		} else if results[r].Err != "" {
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, results[r].Err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("checkpoint: saving in %s: not committed (%s is unchanged): %s",
			dir, LatestFile, strings.Join(failed, "; "))
	}

	var msg []byte
	if rank == 0 {
		for i := range ix.Shards {
			r := results[ix.Shards[i].Rank]
			ix.Shards[i].Bytes, ix.Shards[i].CRC32C = r.Bytes, r.CRC
		}
		if err := commitSave(dir, descs[0].Dir, ix); err != nil {
			msg = []byte(fmt.Sprintf("rank 0: %v", err))
		}
	}
	msg, err = broadcastFrom(ctx, g, 0, msg)
	if err != nil {
		return fmt.Errorf("checkpoint: saving in %s: hearing rank 0's outcome: %w", dir, err)
	}
	if len(msg) > 0 {
		return fmt.Errorf("checkpoint: saving in %s: not committed (%s is unchanged): %s", dir, LatestFile, msg)
	}
	return nil
}

// commitSave is rank 0's last part of a save: the index, then latest.
func commitSave(dir, name string, ix *Index) error {
	stepDir := filepath.Join(dir, name)
	if shardedBeforeIndex != nil {
		if err := shardedBeforeIndex(stepDir); err != nil {
			return err
		}
	}
	js, err := json.MarshalIndent(ix, "", " ")
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(stepDir, IndexFile), func(w io.Writer) error {
		_, err := w.Write(append(js, '\n'))
		return err
	}); err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, LatestFile), func(w io.Writer) error {
		_, err := io.WriteString(w, name+"\n")
		return err
	})
}

// nextSaveName is the directory name of the save of step: step-N, or
// step-N.1 when latest names step-N already. It removes a stale index
// from that directory, so that it never describes shards being
// replaced.
func nextSaveName(dir string, step int64) (string, error) {
	if step < 0 {
		return "", fmt.Errorf("step %d is negative", step)
	}
	name := fmt.Sprintf("step-%08d", step)
	latest, err := readLatest(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	case latest == name:
		name += ".1"
	}
	if err := os.Remove(filepath.Join(dir, name, IndexFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return name, nil
}

// readLatest returns the save directory name that dir's latest file
// holds.
func readLatest(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, LatestFile))
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if err := checkSaveName(name); err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, LatestFile), err)
	}
	return name, nil
}

// describePieces checks a rank's pieces on their own and describes them,
// with the CRC-32C of each one's bytes. Empty pieces are left out.
func describePieces(st ShardedState) saveDesc {
	var d saveDesc
	fail := func(format string, args ...any) saveDesc {
		return saveDesc{Err: fmt.Sprintf(format, args...)}
	}
	for k, dt := range st.DTypes {
		if dt != F32 && dt != I64 {
			return fail("tensor %q: dtype %q is not F32 or I64", k, dt)
		}
	}
	d.DTypes = st.DTypes
	shapes := map[string][]int{}
	for i, p := range st.Pieces {
		if p.Key == "" {
			return fail("piece %d has no key", i)
		}
		n, err := numelOf(p.GlobalShape)
		if err != nil {
			return fail("tensor %q: %v", p.Key, err)
		}
		if s, ok := shapes[p.Key]; ok && !slices.Equal(s, p.GlobalShape) {
			return fail("tensor %q: pieces give shapes %v and %v", p.Key, s, p.GlobalShape)
		}
		shapes[p.Key] = p.GlobalShape
		if len(p.Data) == 0 {
			continue // a padded slice with no real elements holds nothing, wherever it starts
		}
		if p.Offset < 0 || p.Offset > n-len(p.Data) {
			return fail("tensor %q: piece [%d, %d) is outside its %d elements (shape %v)", p.Key, p.Offset, p.Offset+len(p.Data), n, p.GlobalShape)
		}
		if st.DTypes[p.Key] == I64 {
			for j, v := range p.Data {
				if v != float32(math.Trunc(float64(v))) {
					return fail("tensor %q (I64): element %d is %v, not a whole number", p.Key, p.Offset+j, v)
				}
			}
		}
		d.Pieces = append(d.Pieces, descPiece{
			Key: p.Key, Shape: p.GlobalShape, Offset: p.Offset, Length: len(p.Data),
			CRC: fmt.Sprintf("%08x", crcOf(p.Data)), index: i,
		})
	}
	return d
}

// crcOf is the CRC-32C of values as a safetensors file stores them (F32,
// little-endian).
func crcOf(values []float32) uint32 {
	var crc uint32
	e := Entry{Name: "x", DType: F32, Tensor: tensor.New(values, len(values))}
	_, _ = encodeChunks(make([]byte, 0, 64<<10), e, func(b []byte) error {
		crc = crc32.Update(crc, castagnoli, b)
		return nil
	})
	return crc
}

// planSave checks every rank's pieces together and returns the index to
// write (without the shards' sizes and checksums) and the local indexes
// of the pieces this rank writes. Every rank computes the same from the
// same descriptions, so the error is the same on every rank.
func planSave(descs []saveDesc, rank int) (*Index, []int, error) {
	ix := &Index{
		Format:    indexFormat,
		Strategy:  descs[0].Strategy,
		Tensors:   map[string]IndexTensor{},
		Extra:     descs[0].Extra,
		RankExtra: make([]map[string]string, len(descs)),
	}
	shapeFrom := map[string]int{}
	spans := map[string][]span{}
	var problems []string
	for r, d := range descs {
		ix.RankExtra[r] = d.RankExtra
		for _, p := range d.Pieces {
			if t, ok := ix.Tensors[p.Key]; ok {
				if !slices.Equal(t.Shape, p.Shape) {
					return nil, nil, fmt.Errorf("tensor %q: rank %d gives shape %v, rank %d %v", p.Key, shapeFrom[p.Key], t.Shape, r, p.Shape)
				}
			} else {
				ix.Tensors[p.Key] = IndexTensor{Shape: p.Shape, DType: F32}
				shapeFrom[p.Key] = r
			}
			spans[p.Key] = append(spans[p.Key], span{offset: p.Offset, length: p.Length, rank: r, crc: p.CRC})
		}
	}
	for r, d := range descs {
		for k, dt := range d.DTypes {
			t, ok := ix.Tensors[k]
			if !ok {
				continue
			}
			if t.DType != F32 && t.DType != dt {
				return nil, nil, fmt.Errorf("tensor %q: rank %d gives dtype %s, another rank %s", k, r, dt, t.DType)
			}
			t.DType = dt
			ix.Tensors[k] = t
		}
	}
	// Which rank writes each range: the lowest that holds it.
	writer := map[string]map[[2]int]int{}
	for _, key := range slices.Sorted(maps.Keys(ix.Tensors)) {
		n, _ := numelOf(ix.Tensors[key].Shape)
		keep, probs := coverage(key, n, spans[key])
		problems = append(problems, probs...)
		writer[key] = map[[2]int]int{}
		for _, s := range keep {
			writer[key][[2]int{s.offset, s.length}] = s.rank
		}
	}
	if len(problems) > 0 {
		const most = 8
		more := ""
		if len(problems) > most {
			more = fmt.Sprintf("; and %d more", len(problems)-most)
			problems = problems[:most]
		}
		return nil, nil, fmt.Errorf("the ranks' pieces do not cover the tensors exactly: %s%s", strings.Join(problems, "; "), more)
	}
	var write []int
	world := len(descs)
	for r, d := range descs {
		var pieces []IndexPiece
		for _, p := range d.Pieces {
			at := [2]int{p.Offset, p.Length}
			if writer[p.Key][at] != r {
				continue
			}
			delete(writer[p.Key], at) // a rank that holds a range twice writes it once
			pieces = append(pieces, IndexPiece{Key: p.Key, Offset: p.Offset, Length: p.Length, Name: pieceName(p.Key, p.Offset), CRC32C: p.CRC})
			if r == rank {
				write = append(write, p.index)
			}
		}
		if len(pieces) > 0 {
			slices.SortFunc(pieces, func(a, b IndexPiece) int {
				if c := strings.Compare(a.Key, b.Key); c != 0 {
					return c
				}
				return a.Offset - b.Offset
			})
			ix.Shards = append(ix.Shards, IndexShard{File: ShardFileName(r, world), Rank: r, Pieces: pieces})
		}
	}
	return ix, write, nil
}

// writeShard writes a rank's pieces to path atomically and returns the
// file's size and CRC-32C.
func writeShard(path string, pieces []Piece, rank, world int, step int64) (int64, uint32, error) {
	entries := make([]Entry, len(pieces))
	for i, p := range pieces {
		entries[i] = Entry{Name: pieceName(p.Key, p.Offset), DType: F32, Tensor: tensor.New(p.Data, len(p.Data))}
	}
	meta := map[string]string{
		"gotrain.sharded": indexFormat,
		"rank":            strconv.Itoa(rank),
		"world_size":      strconv.Itoa(world),
		"step":            strconv.FormatInt(step, 10),
	}
	var cw crcWriter
	err := WriteFileAtomic(path, func(w io.Writer) error {
		cw = crcWriter{w: w}
		return writeTensors(&cw, entries, meta)
	})
	return cw.n, cw.crc, err
}

// crcWriter counts and checksums what passes through it.
type crcWriter struct {
	w   io.Writer
	n   int64
	crc uint32
}

func (c *crcWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.crc = crc32.Update(c.crc, castagnoli, b[:n])
	return n, err
}

// soloGroup is the group of one rank that a nil Group stands for.
type soloGroup struct{}

func (soloGroup) Rank() int                                 { return 0 }
func (soloGroup) Size() int                                 { return 1 }
func (soloGroup) Broadcast(context.Context, any, int) error { return nil }
func (soloGroup) AllGather(_ context.Context, dst, src any) error {
	copy(dst.([]int64), src.([]int64))
	return nil
}
