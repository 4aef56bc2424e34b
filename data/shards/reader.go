package shards

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Tokens is a split's token stream, memory-mapped read-only shard by
// shard: the pages of the files are the page cache's, not the process's
// heap. Its methods are safe for concurrent use until Close.
type Tokens struct {
	dir   string
	idx   *Index
	width int
	files []mapped
}

// mapped is one shard's mapping.
type mapped struct {
	name string // the file's path, for messages
	data []byte // nil for an empty shard
	n    int    // tokens
}

// Open memory-maps every shard of split in the dataset dir, in the
// index's order. Its errors name the file and what is wrong: no index,
// a missing shard, a size that does not match the index's token count.
func Open(dir, split string) (*Tokens, error) {
	idx, err := ReadIndex(dir)
	if err != nil {
		return nil, err
	}
	return OpenFiles(dir, idx, idx.Files(split))
}

// OpenFiles memory-maps the shards files of the dataset dir, whose index
// is idx, in the order given: a subset of a split, such as the shards a
// node holds. A file idx does not list is an error.
func OpenFiles(dir string, idx *Index, files []string) (*Tokens, error) {
	t := &Tokens{dir: dir, idx: idx, width: Width(idx.DType)}
	for _, name := range files {
		m, err := t.mapFile(name)
		if err != nil {
			_ = t.Close()
			return nil, err
		}
		t.files = append(t.files, m)
	}
	return t, nil
}

// mapFile maps the shard name after checking its size against the index.
func (t *Tokens) mapFile(name string) (mapped, error) {
	path := filepath.Join(t.dir, name)
	s := t.idx.shard(name)
	if s == nil {
		return mapped{}, fmt.Errorf("%w: %s is not a shard of %s", ErrFormat, path, filepath.Join(t.dir, IndexFile))
	}
	f, err := os.Open(path)
	if err != nil {
		return mapped{}, fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return mapped{}, fmt.Errorf("shards: %w", err)
	}
	if want := s.Tokens * int64(t.width); st.Size() != want {
		return mapped{}, fmt.Errorf("%w: %s has %d bytes, the index says %d tokens of %s (%d bytes): truncated or not this dataset's",
			ErrFormat, path, st.Size(), s.Tokens, t.idx.DType, want)
	}
	if s.Tokens > int64(int(^uint(0)>>1))/int64(t.width) {
		return mapped{}, fmt.Errorf("%w: %s: %d tokens are too many to map", ErrFormat, path, s.Tokens)
	}
	m := mapped{name: path, n: int(s.Tokens)}
	if s.Tokens == 0 {
		return m, nil
	}
	if m.data, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return mapped{}, fmt.Errorf("shards: mapping %s: %w", path, err)
	}
	return m, nil
}

// Close unmaps the shards; the Tokens and their Windows must not be used
// after it.
func (t *Tokens) Close() error {
	var errs []error
	for i := range t.files {
		if t.files[i].data != nil {
			if err := unix.Munmap(t.files[i].data); err != nil {
				errs = append(errs, fmt.Errorf("shards: unmapping %s: %w", t.files[i].name, err))
			}
			t.files[i].data = nil
		}
	}
	t.files = nil
	return errors.Join(errs...)
}

// Index returns the dataset's index.
func (t *Tokens) Index() *Index { return t.idx }

// Len returns the tokens of all the mapped shards.
func (t *Tokens) Len() int64 {
	var n int64
	for _, f := range t.files {
		n += int64(f.n)
	}
	return n
}

// id returns token pos of shard f.
func (t *Tokens) id(f *mapped, pos int) int {
	if t.width == 2 {
		return int(binary.LittleEndian.Uint16(f.data[2*pos:]))
	}
	return int(binary.LittleEndian.Uint32(f.data[4*pos:]))
}

// Verify reads every shard: its SHA-256 must match the index's and each
// id must lie inside the vocabulary. It reads every byte once, so it
// costs a pass over the data at disk (or page-cache) speed; Windows
// checks only the ids it reads.
func (t *Tokens) Verify() error {
	for i := range t.files {
		f := &t.files[i]
		h := sha256.Sum256(f.data)
		if s := t.idx.shard(filepath.Base(f.name)); s != nil && hex.EncodeToString(h[:]) != s.SHA256 {
			return fmt.Errorf("%w: %s: SHA-256 %x, the index says %s", ErrFormat, f.name, h, s.SHA256)
		}
		for pos := range f.n {
			if id := t.id(f, pos); id >= t.idx.VocabSize {
				return t.badID(f, pos, id)
			}
		}
	}
	return nil
}

// badID is the error of an id outside the vocabulary at pos of f.
func (t *Tokens) badID(f *mapped, pos, id int) error {
	return fmt.Errorf("%w: %s: token id %d at position %d is outside the vocabulary of size %d", ErrFormat, f.name, id, pos, t.idx.VocabSize)
}

// VerifyFile checks the file of shard s in dir against the index: its
// size and SHA-256, reading it once.
func VerifyFile(dir string, idx *Index, s Shard) error {
	path := filepath.Join(dir, s.File)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("shards: %s: %w", path, err)
	}
	if want := s.Tokens * int64(Width(idx.DType)); n != want {
		return fmt.Errorf("%w: %s has %d bytes, the index says %d tokens of %s (%d bytes)", ErrFormat, path, n, s.Tokens, idx.DType, want)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != s.SHA256 {
		return fmt.Errorf("%w: %s: SHA-256 %s, the index says %s", ErrFormat, path, got, s.SHA256)
	}
	return nil
}

// Windows is a data.SequenceDataset of the windows of the mapped shards:
// in each shard, window j is the T tokens from j·stride, its targets the
// same shifted by one. A window never crosses a shard boundary, as
// nanoGPT's get_batch never reads past the end of its one memmap: a shard
// of n tokens has (n-T-1)/stride+1 windows (none if n <= T), taken in
// shard order.
//
// Sequence reads the tokens straight from the mapping and checks each id
// against the vocabulary as it converts it, one comparison per token. The
// interface has no error return: an id outside the vocabulary is copied
// as it is (a model refuses the batch) and the first such id is kept for
// Err, naming the file and the position.
type Windows struct {
	tok       *Tokens
	t, stride int
	shard     []int // shard[k] is the index of shard k's first window; shard[len] the total
	err       atomic.Pointer[error]
}

// Windows returns the windows of length t, stride apart, over the
// shards. It is an error if no shard has t+1 tokens (one window and its
// targets); it panics if t or stride is not positive.
func (t *Tokens) Windows(T, stride int) (*Windows, error) {
	if T < 1 || stride < 1 {
		panic(fmt.Sprintf("shards: Windows(%d, %d): the length and the stride must be positive", T, stride))
	}
	w := &Windows{tok: t, t: T, stride: stride, shard: make([]int, len(t.files)+1)}
	longest := 0
	for k, f := range t.files {
		n := 0
		if f.n > T {
			n = (f.n-T-1)/stride + 1
		}
		longest = max(longest, f.n)
		w.shard[k+1] = w.shard[k] + n
	}
	if w.Len() == 0 {
		return nil, fmt.Errorf("%w: %s: no window of %d tokens and its target: the longest of the %d shards has %d tokens",
			ErrFormat, t.dir, T, len(t.files), longest)
	}
	return w, nil
}

// Len implements data.SequenceDataset.
func (w *Windows) Len() int { return w.shard[len(w.shard)-1] }

// SeqLen implements data.SequenceDataset.
func (w *Windows) SeqLen() int { return w.t }

// Sequence implements data.SequenceDataset.
func (w *Windows) Sequence(i int, x, y []int) {
	if len(x) != w.t || len(y) != w.t {
		panic(fmt.Sprintf("shards: Windows.Sequence: buffers of %d and %d tokens for sequences of %d", len(x), len(y), w.t))
	}
	if uint(i) >= uint(w.Len()) {
		panic(fmt.Sprintf("shards: Windows.Sequence: index %d outside [0, %d)", i, w.Len()))
	}
	k := sort.SearchInts(w.shard, i+1) - 1
	f := &w.tok.files[k]
	start := (i - w.shard[k]) * w.stride
	vocab := w.tok.idx.VocabSize
	for j := 0; j <= w.t; j++ {
		id := w.tok.id(f, start+j)
		if id >= vocab && w.err.Load() == nil {
			err := w.tok.badID(f, start+j, id)
			w.err.CompareAndSwap(nil, &err)
		}
		if j < w.t {
			x[j] = id
		}
		if j > 0 {
			y[j-1] = id
		}
	}
}

// Err returns the first id outside the vocabulary that Sequence read, as
// an error naming the file and the position, or nil.
func (w *Windows) Err() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}
