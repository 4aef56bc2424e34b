package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// loadHead is what rank 0 broadcasts at the start of a load.
type loadHead struct {
	Status string          `json:"status"` // "ok", "none" or "error"
	Dir    string          `json:"dir"`    // the save's directory name; "" when dir is the save itself
	Msg    string          `json:"msg,omitempty"`
	Index  json.RawMessage `json:"index,omitempty"`
}

// loadReq is what a rank tells the others of its requests.
type loadReq struct {
	Err  string         `json:"err,omitempty"`
	Reqs []PieceRequest `json:"reqs"`
	Have []bool         `json:"have"` // by shard of the index: the file is here, of the right size
}

// LoadSharded loads the ranges want from the newest save in dir (the one
// dir/latest names; or dir itself, if it holds an index.json), whatever
// world size and strategy saved it: each range is assembled from the
// pieces of every shard file that holds part of it. Every rank of g must
// call it; a nil g is a group of one. It returns, in order, one piece per
// request, and the save's step, strategy and non-tensor state.
//
// Rank 0's index is the one loaded: rank 0 reads it and broadcasts it.
// Each shard is read where it is: when every rank that needs part of a
// shard has the file (a shared file system), each reads it itself;
// otherwise the lowest rank that has it reads it and broadcasts its bytes
// to every rank, which keeps what it needs (simple and correct, at the
// cost of sending each such shard to every rank). Besides what it asked
// for, a rank holds one shard file at a time, raw and decoded. Every file is
// checked against the CRC-32C the index records for it and its own
// per-tensor checksums.
//
// The requests of all ranks together must name exactly the checkpoint's
// tensors with their shapes; otherwise the error lists the missing,
// unexpected and mis-shaped keys. When dir holds no save the error wraps
// fs.ErrNotExist. A shard that is on no rank, or corrupt, is an error
// naming the file and the rank that wrote it. Every rank returns the same
// error.
func LoadSharded(ctx context.Context, g Group, dir string, want []PieceRequest, opts ...Option) (*ShardedLoad, error) {
	if g == nil {
		g = soloGroup{}
	}
	cfg := newReadConfig(opts)
	rank := g.Rank()

	var head loadHead
	var headErr error
	if rank == 0 {
		name, data, err := readSaveIndex(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			head = loadHead{Status: "none", Msg: err.Error()}
		case err != nil:
			head, headErr = loadHead{Status: "error", Msg: err.Error()}, err
		default:
			head = loadHead{Status: "ok", Dir: name, Index: data}
		}
	}
	js, err := json.Marshal(head)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: loading %s: %w", dir, err)
	}
	if js, err = broadcastFrom(ctx, g, 0, js); err != nil {
		return nil, fmt.Errorf("checkpoint: loading %s: hearing rank 0's index: %w", dir, err)
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, fmt.Errorf("checkpoint: loading %s: rank 0 sent an unreadable index (another version of gotrain?): %w", dir, err)
	}
	switch head.Status {
	case "none":
		return nil, fmt.Errorf("checkpoint: loading %s on rank 0: %w", dir, fs.ErrNotExist)
	case "error":
		if headErr != nil {
			return nil, fmt.Errorf("%w (on rank 0)", headErr)
		}
		return nil, fmt.Errorf("%s (on rank 0)", head.Msg)
	}
	stepDir := filepath.Join(dir, head.Dir)
	ixName := filepath.Join(stepDir, IndexFile)
	ix, err := parseIndex(ixName, head.Index)
	if err != nil {
		return nil, err
	}

	// Every rank learns every rank's requests and which shards it has.
	mine := loadReq{Reqs: want, Have: make([]bool, len(ix.Shards))}
	mine.Err = checkRequests(want)
	for i, sh := range ix.Shards {
		fi, err := os.Stat(filepath.Join(stepDir, sh.File))
		mine.Have[i] = err == nil && fi.Mode().IsRegular() && fi.Size() == sh.Bytes
	}
	if js, err = json.Marshal(mine); err != nil {
		return nil, fmt.Errorf("checkpoint: loading %s: %w", stepDir, err)
	}
	raw, err := gatherBytes(ctx, g, js)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: loading %s: exchanging the ranks' requests: %w", stepDir, err)
	}
	reqs := make([]loadReq, len(raw))
	var failed []string
	for r, b := range raw {
		if err := json.Unmarshal(b, &reqs[r]); err != nil || len(reqs[r].Have) != len(ix.Shards) {
			failed = append(failed, fmt.Sprintf("rank %d sent unreadable requests (another version of gotrain?)", r))
		} else if reqs[r].Err != "" {
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, reqs[r].Err))
		}
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("checkpoint: loading %s: %s", stepDir, strings.Join(failed, "; "))
	}
	if err := matchModel(ix, reqs); err != nil {
		return nil, fmt.Errorf("checkpoint: loading %s: the checkpoint does not match what the ranks ask for: %w", stepDir, err)
	}

	// Which ranks need each shard, and who reads it.
	byKey := make([]map[string][]PieceRequest, len(reqs))
	for r, q := range reqs {
		byKey[r] = map[string][]PieceRequest{}
		for _, p := range q.Reqs {
			byKey[r][p.Key] = append(byKey[r][p.Key], p)
		}
	}
	needs := make([][]int, len(ix.Shards))
	for i, sh := range ix.Shards {
		for r := range reqs {
			if overlaps(sh.Pieces, byKey[r]) {
				needs[i] = append(needs[i], r)
			}
		}
		if len(needs[i]) > 0 && sourceOf(reqs, i) < 0 {
			return nil, fmt.Errorf("checkpoint: loading %s: shard %s, written by rank %d, is on no rank (%d bytes expected)",
				stepDir, filepath.Join(stepDir, sh.File), sh.Rank, sh.Bytes)
		}
	}

	out := make([]Piece, len(want))
	for k, q := range want {
		out[k] = Piece{Key: q.Key, GlobalShape: slices.Clone(q.GlobalShape), Offset: q.Offset, Data: make([]float32, q.Length)}
	}
	var localErr error
	for i, sh := range ix.Shards {
		if len(needs[i]) == 0 {
			continue
		}
		path := filepath.Join(stepDir, sh.File)
		needed := slices.Contains(needs[i], rank)
		everyone := true
		for _, r := range needs[i] {
			everyone = everyone && reqs[r].Have[i]
		}
		if everyone {
			if needed && localErr == nil {
				data, err := os.ReadFile(path)
				if err == nil {
					err = fillFromShard(path, data, sh, out, cfg)
				} else {
					err = fmt.Errorf("checkpoint: shard %s, written by rank %d: %w", path, sh.Rank, err)
				}
				localErr = err
			}
			continue
		}
		src := sourceOf(reqs, i)
		var payload []byte
		var srcErr error
		if rank == src {
			data, err := os.ReadFile(path)
			if err == nil {
				err = checkShardBytes(path, data, sh)
			} else {
				err = fmt.Errorf("checkpoint: shard %s, written by rank %d: %w", path, sh.Rank, err)
			}
			if err != nil {
				srcErr, payload = err, append([]byte{1}, err.Error()...)
			} else {
				payload = append([]byte{0}, data...)
			}
		}
		payload, err := broadcastFrom(ctx, g, src, payload)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: loading %s: receiving shard %s from rank %d: %w", stepDir, sh.File, src, err)
		}
		if len(payload) == 0 || payload[0] != 0 {
			if srcErr != nil {
				return nil, fmt.Errorf("%w (read by rank %d)", srcErr, src)
			}
			if len(payload) == 0 {
				return nil, fmt.Errorf("checkpoint: loading %s: rank %d sent nothing for shard %s", stepDir, src, sh.File)
			}
			return nil, fmt.Errorf("%s (read by rank %d)", payload[1:], src)
		}
		if needed && localErr == nil {
			localErr = fillFromShard(fmt.Sprintf("rank %d's %s", src, path), payload[1:], sh, out, cfg)
		}
	}
	if err := agreeError(ctx, g, localErr); err != nil {
		return nil, err
	}
	return &ShardedLoad{
		Dir: stepDir, Step: ix.Step, Strategy: ix.Strategy, WorldSize: ix.WorldSize,
		Pieces: out, Extra: ix.Extra, RankExtra: ix.RankExtra,
	}, nil
}

// sourceOf is the lowest rank that has shard i, or -1.
func sourceOf(reqs []loadReq, i int) int {
	for r, q := range reqs {
		if q.Have[i] {
			return r
		}
	}
	return -1
}

// overlaps reports whether any request (by key) asks for part of any
// piece.
func overlaps(pieces []IndexPiece, reqs map[string][]PieceRequest) bool {
	for _, p := range pieces {
		for _, q := range reqs[p.Key] {
			if p.Offset < q.Offset+q.Length && q.Offset < p.Offset+p.Length {
				return true
			}
		}
	}
	return false
}

// checkRequests checks a rank's requests on their own.
func checkRequests(want []PieceRequest) string {
	for i, q := range want {
		if q.Key == "" {
			return fmt.Sprintf("request %d has no key", i)
		}
		n, err := numelOf(q.GlobalShape)
		if err != nil {
			return fmt.Sprintf("request for tensor %q: %v", q.Key, err)
		}
		if q.Offset < 0 || q.Length < 0 || q.Offset > n-q.Length {
			return fmt.Sprintf("request for tensor %q: range [%d, %d) is outside its %d elements (shape %v)", q.Key, q.Offset, q.Offset+q.Length, n, q.GlobalShape)
		}
	}
	return ""
}

// matchModel checks the ranks' requests, together, against the index:
// every key of the checkpoint asked for by some rank, every key asked for
// in the checkpoint, with its shape.
func matchModel(ix *Index, reqs []loadReq) error {
	asked := map[string][]int{}
	var shapes []string
	for _, q := range reqs {
		for _, p := range q.Reqs {
			if s, ok := asked[p.Key]; ok && !slices.Equal(s, p.GlobalShape) {
				return fmt.Errorf("ranks ask for tensor %q with shapes %v and %v", p.Key, s, p.GlobalShape)
			}
			asked[p.Key] = p.GlobalShape
		}
	}
	var missing, unexpected []string
	for _, key := range slices.Sorted(maps.Keys(asked)) {
		t, ok := ix.Tensors[key]
		switch {
		case !ok:
			missing = append(missing, key)
		case !slices.Equal(t.Shape, asked[key]):
			shapes = append(shapes, fmt.Sprintf("%s: checkpoint %v, model %v", key, t.Shape, asked[key]))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(ix.Tensors)) {
		if _, ok := asked[key]; !ok {
			unexpected = append(unexpected, key)
		}
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "missing keys (asked for, not in the checkpoint): "+strings.Join(missing, ", "))
	}
	if len(unexpected) > 0 {
		parts = append(parts, "unexpected keys (in the checkpoint, asked for by no rank): "+strings.Join(unexpected, ", "))
	}
	if len(shapes) > 0 {
		parts = append(parts, "shape mismatches: "+strings.Join(shapes, "; "))
	}
	if len(parts) > 0 {
		return errors.New(strings.Join(parts, "; "))
	}
	return nil
}

// checkShardBytes checks a shard file's bytes against the index.
func checkShardBytes(path string, data []byte, sh IndexShard) error {
	if int64(len(data)) != sh.Bytes {
		return fmt.Errorf("checkpoint: shard %s, written by rank %d, is corrupt: %d bytes, the index records %d", path, sh.Rank, len(data), sh.Bytes)
	}
	if got := fmt.Sprintf("%08x", crc32.Checksum(data, castagnoli)); got != sh.CRC32C {
		return fmt.Errorf("checkpoint: shard %s, written by rank %d, is corrupt: its CRC-32C is %s, the index records %s", path, sh.Rank, got, sh.CRC32C)
	}
	return nil
}

// decodeShard checks and decodes a shard file's bytes and returns its
// pieces' values by name.
func decodeShard(path string, data []byte, sh IndexShard, cfg readConfig) (map[string][]float32, error) {
	if err := checkShardBytes(path, data, sh); err != nil {
		return nil, err
	}
	entries, _, err := readNamed(path, bytes.NewReader(data), int64(len(data)), cfg)
	if err != nil {
		return nil, fmt.Errorf("%w (a shard written by rank %d)", err, sh.Rank)
	}
	vals := make(map[string][]float32, len(entries))
	for _, e := range entries {
		vals[e.Name] = e.Tensor.Data()
	}
	for _, p := range sh.Pieces {
		if v, ok := vals[p.Name]; !ok || len(v) != p.Length {
			return nil, fmt.Errorf("checkpoint: shard %s, written by rank %d, does not hold %d elements as %q, as the index says", path, sh.Rank, p.Length, p.Name)
		}
	}
	return vals, nil
}

// fillFromShard copies the parts of shard sh that out asks for into out.
func fillFromShard(path string, data []byte, sh IndexShard, out []Piece, cfg readConfig) error {
	vals, err := decodeShard(path, data, sh, cfg)
	if err != nil {
		return err
	}
	outByKey := map[string][]int{}
	for k, q := range out {
		outByKey[q.Key] = append(outByKey[q.Key], k)
	}
	for _, p := range sh.Pieces {
		v := vals[p.Name]
		for _, k := range outByKey[p.Key] {
			q := out[k]
			lo, hi := max(p.Offset, q.Offset), min(p.Offset+p.Length, q.Offset+len(q.Data))
			if lo < hi {
				copy(q.Data[lo-q.Offset:hi-q.Offset], v[lo-p.Offset:hi-p.Offset])
			}
		}
	}
	return nil
}

// readSaveIndex finds the save in dir (dir itself if it holds an index,
// else the one dir/latest names) and returns its name under dir ("" for
// dir itself) and its index's bytes. An error wraps fs.ErrNotExist when
// there is no save.
func readSaveIndex(dir string) (string, []byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err == nil {
		return "", data, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	name, err := readLatest(dir)
	if err != nil {
		return "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	data, err = os.ReadFile(filepath.Join(dir, name, IndexFile))
	if err != nil {
		// latest is written after the index: a missing index is damage,
		// not the absence of a save.
		return "", nil, fmt.Errorf("checkpoint: %s names %s, whose index cannot be read: %v", filepath.Join(dir, LatestFile), name, err)
	}
	return name, data, nil
}
