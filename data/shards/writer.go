package shards

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"regexp"
	"slices"
)

// DefaultShardTokens is the tokens of a full shard when the writer is
// given none: 100M, 200 MB of uint16, as many prepared corpora use.
const DefaultShardTokens = 100_000_000

// Writer writes a dataset: the tokens given to Write, split by split, in
// shards of at most ShardTokens, each renamed into place once complete,
// and the index on Close. A Writer is used by one goroutine.
type Writer struct {
	dir         string
	idx         Index
	shardTokens int64
	width       int
	open        map[string]*shardFile // the shard being written, per split
	next        map[string]int        // the number of a split's next shard
	buf         []byte
	done        bool
}

// shardFile is a shard being written: a temporary file.
type shardFile struct {
	name string // its final name
	f    *os.File
	bw   *bufio.Writer
	h    hash.Hash
	n    int64
}

// writtenShard matches the files a Writer names: its shards, and the
// temporary files of shards and index a Writer that was killed left.
var writtenShard = regexp.MustCompile(`^((train|val)-[0-9]{6,}\.bin|\.(train|val)-[0-9]{6,}\.bin\.tmp[0-9]*|\.index\.json\.tmp[0-9]*)$`)

// Create starts a dataset in dir (created if missing) for the tokens of
// the tokenizer spec names, of a vocabulary of vocab ids with end-of-text
// id eot (-1 for none), in shards of shardTokens (0 for
// DefaultShardTokens). A dataset already in dir stops being one at once:
// its index.json and shards (and the temporary files of a writer that was
// killed) are removed before anything is written.
func Create(dir, spec string, vocab, eot int, shardTokens int64) (*Writer, error) {
	if shardTokens == 0 {
		shardTokens = DefaultShardTokens
	}
	idx := Index{Format: Format, Tokenizer: spec, VocabSize: vocab, EOT: eot, DType: DTypeFor(vocab)}
	if shardTokens < 1 {
		return nil, fmt.Errorf("shards: %d tokens per shard: want at least 1", shardTokens)
	}
	if err := idx.check(); err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if err := os.Remove(filepath.Join(dir, IndexFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	for _, e := range ents {
		if writtenShard.MatchString(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return nil, fmt.Errorf("shards: %w", err)
			}
		}
	}
	return &Writer{dir: dir, idx: idx, shardTokens: shardTokens, width: Width(idx.DType),
		open: map[string]*shardFile{}, next: map[string]int{}}, nil
}

// Write appends ids to split's token stream ("train" or "val"). An id
// outside the vocabulary is an error, and nothing of ids is written.
func (w *Writer) Write(split string, ids []int) error {
	if w.done {
		return errors.New("shards: Write after Close or Abort")
	}
	if split != Train && split != Val {
		return fmt.Errorf("shards: split %q: want %q or %q", split, Train, Val)
	}
	for i, id := range ids {
		if id < 0 || id >= w.idx.VocabSize {
			return fmt.Errorf("shards: token id %d (at %d of %d written) is outside the vocabulary of size %d", id, i, len(ids), w.idx.VocabSize)
		}
	}
	for len(ids) > 0 {
		s := w.open[split]
		if s == nil {
			var err error
			if s, err = w.newShard(split); err != nil {
				return err
			}
		}
		k := int(min(int64(len(ids)), w.shardTokens-s.n))
		if err := w.put(s, ids[:k]); err != nil {
			return err
		}
		ids = ids[k:]
		if s.n == w.shardTokens {
			if err := w.finish(split); err != nil {
				return err
			}
		}
	}
	return nil
}

// newShard opens split's next shard as a temporary file.
func (w *Writer) newShard(split string) (*shardFile, error) {
	name := fmt.Sprintf("%s-%06d.bin", split, w.next[split])
	f, err := os.CreateTemp(w.dir, "."+name+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	w.next[split]++
	s := &shardFile{name: name, f: f, bw: bufio.NewWriterSize(f, 1<<20), h: sha256.New()}
	w.open[split] = s
	return s, nil
}

// put encodes ids little-endian into s.
func (w *Writer) put(s *shardFile, ids []int) error {
	w.buf = w.buf[:0]
	for _, id := range ids {
		if w.width == 2 {
			w.buf = binary.LittleEndian.AppendUint16(w.buf, uint16(id))
		} else {
			w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(id))
		}
	}
	s.h.Write(w.buf)
	if _, err := s.bw.Write(w.buf); err != nil {
		return fmt.Errorf("shards: %s: %w", s.f.Name(), err)
	}
	s.n += int64(len(ids))
	return nil
}

// finish completes split's open shard: flushed, fsynced, renamed to its
// name and listed in the index.
func (w *Writer) finish(split string) error {
	s := w.open[split]
	delete(w.open, split)
	err := s.bw.Flush()
	if err == nil {
		err = s.f.Sync()
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(s.f.Name(), filepath.Join(w.dir, s.name))
	}
	if err != nil {
		_ = os.Remove(s.f.Name())
		return fmt.Errorf("shards: %s: %w", filepath.Join(w.dir, s.name), err)
	}
	w.idx.Shards = append(w.idx.Shards, Shard{File: s.name, Split: split, Tokens: s.n, SHA256: hex.EncodeToString(s.h.Sum(nil))})
	return nil
}

// Close completes the open shards and writes the index, which makes dir
// a dataset. On error dir is not one (it has no index.json).
func (w *Writer) Close() (*Index, error) {
	if w.done {
		return nil, errors.New("shards: Close after Close or Abort")
	}
	for _, split := range []string{Train, Val} {
		if s := w.open[split]; s != nil {
			if err := w.finish(split); err != nil {
				w.Abort()
				return nil, err
			}
		}
	}
	w.done = true
	// Each split's shards in order, the training split first.
	slices.SortStableFunc(w.idx.Shards, func(a, b Shard) int {
		if a.Split == b.Split {
			return 0
		}
		if a.Split == Train {
			return -1
		}
		return 1
	})
	b, err := json.MarshalIndent(&w.idx, "", " ")
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(w.dir, IndexFile), append(b, '\n')); err != nil {
		return nil, err
	}
	idx := w.idx
	return &idx, nil
}

// Abort removes the open shards' temporary files. The shards completed
// stay, but without an index dir is not a dataset.
func (w *Writer) Abort() {
	w.done = true
	for split, s := range w.open {
		_ = s.f.Close()
		_ = os.Remove(s.f.Name())
		delete(w.open, split)
	}
}

// writeFileAtomic writes b to path through a temporary file that is
// fsynced and renamed, then fsyncs the directory.
func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("shards: %s: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir makes the renames and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("shards: %s: %w", dir, err)
	}
	return nil
}
