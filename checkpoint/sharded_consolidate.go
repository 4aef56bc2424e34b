package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/tensor"
)

// Consolidate assembles every tensor of the newest save in dir (as
// LoadSharded finds it) from its shard files, which must all be in that
// save's directory, and returns them sorted by key, each with the dtype
// the save gave it (I64 integer buffers, F32 the rest), and the index.
// Errors name the file and what is wrong with it; a missing or corrupt
// shard names the rank that wrote it.
func Consolidate(dir string, opts ...Option) ([]Entry, *Index, error) {
	cfg := newReadConfig(opts)
	name, data, err := readSaveIndex(dir)
	if err != nil {
		return nil, nil, err
	}
	stepDir := filepath.Join(dir, name)
	ix, err := parseIndex(filepath.Join(stepDir, IndexFile), data)
	if err != nil {
		return nil, nil, err
	}
	keys := slices.Sorted(maps.Keys(ix.Tensors))
	out := make([]Piece, len(keys))
	for i, k := range keys {
		n, _ := numelOf(ix.Tensors[k].Shape)
		out[i] = Piece{Key: k, GlobalShape: ix.Tensors[k].Shape, Data: make([]float32, n)}
	}
	for _, sh := range ix.Shards {
		path := filepath.Join(stepDir, sh.File)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: shard %s, written by rank %d: %w", path, sh.Rank, err)
		}
		if err := fillFromShard(path, data, sh, out, cfg); err != nil {
			return nil, nil, err
		}
	}
	entries := make([]Entry, len(out))
	for i, p := range out {
		entries[i] = Entry{Name: p.Key, DType: ix.Tensors[p.Key].DType, Tensor: tensor.New(p.Data, p.GlobalShape...)}
	}
	return entries, ix, nil
}

// ConsolidateModel writes the model's tensors of a checkpoint to out as
// one safetensors file (as Save writes it, atomically), which loads into
// the PyTorch model with load_state_dict. src is a sharded checkpoint's
// directory, whose model keys (IsModelKey) are written, or a single-file
// checkpoint: a training state (SaveTraining's sidecar), whose model
// tensors are written, or a model file, written again.
func ConsolidateModel(src, out string, opts ...Option) error {
	var entries []Entry
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if fi.IsDir() {
		all, _, err := Consolidate(src, opts...)
		if err != nil {
			return err
		}
		for _, e := range all {
			if IsModelKey(e.Name) {
				entries = append(entries, e)
			}
		}
	} else {
		all, meta, err := ReadTensorsFile(src, opts...)
		if err != nil {
			return err
		}
		if _, ok := meta["gotrain.training"]; ok {
			for _, e := range all {
				if name, ok := strings.CutPrefix(e.Name, modelPrefix); ok {
					e.Name = name
					entries = append(entries, e)
				}
			}
		} else {
			entries = all
		}
	}
	if len(entries) == 0 {
		return fmt.Errorf("checkpoint: %s holds no model tensors", src)
	}
	return WriteFileAtomic(out, func(w io.Writer) error { return writeTensors(w, entries, modelMeta) })
}

// ShardedInfo describes a sharded checkpoint for people (gotrain
// checkpoint inspect).
type ShardedInfo struct {
	// Dir is the save's directory.
	Dir   string
	Index *Index
	// Shards says, for each of Index.Shards, whether the file here is
	// sound: "ok", or what is wrong with it.
	Shards []string
	// Problems lists the ranges of tensors that the shards do not cover
	// exactly; empty when every tensor is fully covered.
	Problems []string
}

// InspectSharded reads the newest save in dir (as LoadSharded finds it)
// and checks each shard file that the index lists against the size and
// CRC-32C it records. Problems with the shards are reported in the
// result; only a missing or unreadable index is an error.
func InspectSharded(dir string) (*ShardedInfo, error) {
	name, data, err := readSaveIndex(dir)
	if err != nil {
		return nil, err
	}
	info := &ShardedInfo{Dir: filepath.Join(dir, name), Index: &Index{}}
	ixPath := filepath.Join(info.Dir, IndexFile)
	if err := json.Unmarshal(data, info.Index); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: not a sharded checkpoint index: %w", ixPath, err)
	}
	if info.Problems, err = info.Index.Check(); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", ixPath, err)
	}
	for _, sh := range info.Index.Shards {
		info.Shards = append(info.Shards, shardStatus(filepath.Join(info.Dir, sh.File), sh))
	}
	return info, nil
}

// shardStatus is "ok" or what is wrong with the shard file at path.
func shardStatus(path string, sh IndexShard) string {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	switch {
	case err != nil:
		return err.Error()
	case n != sh.Bytes:
		return fmt.Sprintf("corrupt: %d bytes, the index records %d", n, sh.Bytes)
	case fmt.Sprintf("%08x", h.Sum32()) != sh.CRC32C:
		return fmt.Sprintf("corrupt: CRC-32C %08x, the index records %s", h.Sum32(), sh.CRC32C)
	}
	return "ok"
}
