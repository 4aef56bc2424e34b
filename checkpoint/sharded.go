package checkpoint

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
)

// A sharded checkpoint is a directory that SaveSharded fills:
//
//	DIR/latest                        the name of the newest complete save
//	DIR/step-00000100/index.json      what the save holds and where
//	DIR/step-00000100/shard-00000-of-00004.safetensors
//	...
//
// Each rank writes its own shard file; rank 0 writes index.json last,
// once every rank has reported its shard written, and then points latest
// at the new directory. A save that stops anywhere before that leaves
// latest naming the previous save, which loads as before.

// Piece is a contiguous range of one tensor as a rank holds it: the
// elements [Offset, Offset+len(Data)) of the tensor Key of shape
// GlobalShape, flattened in row-major order. Model parameters and buffers
// go under their state-dict names, optimizer state under names beginning
// with OptimPrefix.
type Piece struct {
	Key         string
	GlobalShape []int
	Offset      int
	Data        []float32
}

// OptimPrefix begins the keys of optimizer state ("optim.state.<param
// name>.exp_avg"); every other key is part of the model, and is what a
// consolidated model file holds.
const OptimPrefix = "optim."

// IsModelKey reports whether key names model state rather than optimizer
// state.
func IsModelKey(key string) bool { return !strings.HasPrefix(key, OptimPrefix) }

// ShardedState is what one rank passes to SaveSharded.
type ShardedState struct {
	// Step is the training step the save is of; it names the save's
	// directory.
	Step int64
	// Strategy says how the ranks held the state ("FULL_SHARD", "DDP",
	// ...); it is recorded for people, and loading does not depend on it.
	Strategy string
	// Pieces are this rank's ranges of the tensors. Together the ranks'
	// pieces must cover every tensor exactly; a range that several ranks
	// hold (a replica) must hold the same values on each, and is written
	// once, by the lowest of them.
	Pieces []Piece
	// DTypes gives the dtype a tensor has in a consolidated file: I64
	// for integer buffers (their float32 values must be whole numbers),
	// F32 (the default) for the rest.
	DTypes map[string]DType
	// Extra is state that is the same on every rank (the scheduler's,
	// the sampler's position, a comm hook's), as strings (JSON, say).
	// Rank 0's is saved.
	Extra map[string]string
	// RankExtra is state of this rank alone, such as its RNG's; every
	// rank's is saved and loading returns them all.
	RankExtra map[string]string
}

// PieceRequest is a range one rank wants back from LoadSharded: the
// elements [Offset, Offset+Length) of the tensor Key, which must have
// GlobalShape in the checkpoint.
type PieceRequest struct {
	Key         string
	GlobalShape []int
	Offset      int
	Length      int
}

// ShardedLoad is what LoadSharded returns to a rank.
type ShardedLoad struct {
	// Dir is the directory of the save that was loaded.
	Dir      string
	Step     int64
	Strategy string
	// WorldSize is the number of ranks that saved.
	WorldSize int
	// Pieces holds the ranges asked for, one per request, in order.
	Pieces []Piece
	// Extra is rank 0's ShardedState.Extra at the save.
	Extra map[string]string
	// RankExtra is each saving rank's ShardedState.RankExtra, by rank.
	RankExtra []map[string]string
}

// Names of the files of a sharded checkpoint.
const (
	// LatestFile names, in a checkpoint directory, the file that holds
	// the name of the newest complete save's directory.
	LatestFile = "latest"
	// IndexFile is the name of a save's index.
	IndexFile = "index.json"
	// indexFormat identifies index.json files of this format.
	indexFormat = "gotrain.sharded/1"
)

// ShardFileName is the name of the shard file rank writes in a save by
// world ranks.
func ShardFileName(rank, world int) string {
	return fmt.Sprintf("shard-%05d-of-%05d.safetensors", rank, world)
}

// Index is the content of a save's index.json.
type Index struct {
	Format    string `json:"format"`
	WorldSize int    `json:"world_size"`
	Step      int64  `json:"step"`
	Strategy  string `json:"strategy"`
	// Tensors are the checkpoint's tensors by key.
	Tensors map[string]IndexTensor `json:"tensors"`
	// Shards are the shard files that hold data, by rank.
	Shards []IndexShard `json:"shards"`
	// Extra and RankExtra are ShardedState's.
	Extra     map[string]string   `json:"extra"`
	RankExtra []map[string]string `json:"rank_extra"`
}

// IndexTensor is one tensor of an Index.
type IndexTensor struct {
	Shape []int `json:"shape"`
	DType DType `json:"dtype"`
}

// IndexShard is one shard file of an Index.
type IndexShard struct {
	File  string `json:"file"`
	Rank  int    `json:"rank"`
	Bytes int64  `json:"bytes"`
	// CRC32C is the CRC-32C of the whole file, 8 hex digits.
	CRC32C string       `json:"crc32c"`
	Pieces []IndexPiece `json:"pieces"`
}

// IndexPiece is one piece in a shard file: the elements [Offset,
// Offset+Length) of the tensor Key, stored as the 1-D tensor Name.
type IndexPiece struct {
	Key    string `json:"key"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	Name   string `json:"name"`
	// CRC32C is the CRC-32C of the piece's bytes, as the shard file's
	// own checksums record it.
	CRC32C string `json:"crc32c"`
}

// pieceName is the name of a piece's tensor in its shard file; offsets
// within a rank are distinct, so names are.
func pieceName(key string, offset int) string { return fmt.Sprintf("%s@%d", key, offset) }

// numelOf returns the element count of shape, or an error for a negative
// dimension or an overflow.
func numelOf(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt32*64/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// span is a range of a tensor held by a rank, for checking coverage.
type span struct {
	offset, length int
	rank           int
	crc            string
}

// coverage checks that spans cover [0, numel) of tensor key exactly,
// identical ranges (replicas) holding the same data. It returns the spans
// to keep (the lowest rank of each replica set) and the problems found.
func coverage(key string, numel int, spans []span) (keep []span, problems []string) {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b span) int {
		if a.offset != b.offset {
			return a.offset - b.offset
		}
		if a.length != b.length {
			return a.length - b.length
		}
		return a.rank - b.rank
	})
	end := 0
	for i := 0; i < len(spans); {
		s := spans[i]
		j := i + 1
		for j < len(spans) && spans[j].offset == s.offset && spans[j].length == s.length {
			if spans[j].crc != s.crc {
				problems = append(problems, fmt.Sprintf("tensor %q: ranks %d and %d hold different values for elements [%d, %d)",
					key, s.rank, spans[j].rank, s.offset, s.offset+s.length))
			}
			j++
		}
		switch {
		case s.offset > end:
			problems = append(problems, fmt.Sprintf("tensor %q: elements [%d, %d) are held by no rank", key, end, s.offset))
		case s.offset < end:
			prev := keep[len(keep)-1]
			problems = append(problems, fmt.Sprintf("tensor %q: rank %d's elements [%d, %d) overlap rank %d's [%d, %d) without being the same range",
				key, s.rank, s.offset, s.offset+s.length, prev.rank, prev.offset, prev.offset+prev.length))
		}
		keep = append(keep, s)
		end = max(end, s.offset+s.length)
		i = j
	}
	if end < numel {
		problems = append(problems, fmt.Sprintf("tensor %q: elements [%d, %d) are held by no rank", key, end, numel))
	}
	return keep, problems
}

// Check validates an index: its format, the shard files' names and
// ranks, and that the pieces cover every tensor exactly once. It returns
// the problems found (an empty list for a sound index); the first error
// is about the format, when the index cannot be used at all.
func (ix *Index) Check() (problems []string, err error) {
	if ix.Format != indexFormat {
		return nil, fmt.Errorf("format %q is not %q (not a gotrain sharded checkpoint, or another version of gotrain)", ix.Format, indexFormat)
	}
	if ix.WorldSize < 1 {
		return nil, fmt.Errorf("world_size %d is not positive", ix.WorldSize)
	}
	spans := map[string][]span{}
	seenRank := map[int]bool{}
	for _, sh := range ix.Shards {
		if sh.Rank < 0 || sh.Rank >= ix.WorldSize || seenRank[sh.Rank] {
			return nil, fmt.Errorf("shard %q: rank %d is out of range or repeated (world size %d)", sh.File, sh.Rank, ix.WorldSize)
		}
		seenRank[sh.Rank] = true
		if sh.File != ShardFileName(sh.Rank, ix.WorldSize) {
			return nil, fmt.Errorf("shard of rank %d is named %q, not %q", sh.Rank, sh.File, ShardFileName(sh.Rank, ix.WorldSize))
		}
		for _, p := range sh.Pieces {
			t, ok := ix.Tensors[p.Key]
			if !ok {
				return nil, fmt.Errorf("shard %q holds a piece of tensor %q, which the index does not list", sh.File, p.Key)
			}
			n, err := numelOf(t.Shape)
			if err != nil {
				return nil, fmt.Errorf("tensor %q: %w", p.Key, err)
			}
			if p.Offset < 0 || p.Length <= 0 || p.Offset > n-p.Length {
				return nil, fmt.Errorf("shard %q: piece [%d, %d) is outside tensor %q of %d elements", sh.File, p.Offset, p.Offset+p.Length, p.Key, n)
			}
			if p.Name != pieceName(p.Key, p.Offset) {
				return nil, fmt.Errorf("shard %q: piece of tensor %q at %d is named %q", sh.File, p.Key, p.Offset, p.Name)
			}
			spans[p.Key] = append(spans[p.Key], span{offset: p.Offset, length: p.Length, rank: sh.Rank})
		}
	}
	for _, key := range slices.Sorted(maps.Keys(ix.Tensors)) {
		t := ix.Tensors[key]
		if t.DType != F32 && t.DType != I64 {
			return nil, fmt.Errorf("tensor %q: dtype %q is not F32 or I64", key, t.DType)
		}
		n, err := numelOf(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", key, err)
		}
		keep, probs := coverage(key, n, spans[key])
		problems = append(problems, probs...)
		// Replicas are written once, so an index holds none.
		if len(probs) == 0 && len(keep) != len(spans[key]) {
			problems = append(problems, fmt.Sprintf("tensor %q: a range is stored more than once", key))
		}
	}
	return problems, nil
}

// parseIndex decodes and checks index.json; name is the file's path for
// errors.
func parseIndex(name string, data []byte) (*Index, error) {
	var ix Index
	if err := json.Unmarshal(data, &ix); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: not a sharded checkpoint index: %w", name, err)
	}
	problems, err := ix.Check()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", name, err)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("checkpoint: %s: the shards do not cover the tensors exactly: %s", name, strings.Join(problems, "; "))
	}
	return &ix, nil
}

// checkSaveName refuses a directory name from a latest file that would
// lead out of the checkpoint directory.
func checkSaveName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || filepath.Base(name) != name {
		return fmt.Errorf("%q is not the name of a save directory", name)
	}
	return nil
}
