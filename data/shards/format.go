// Package shards is the on-disk format of a prepared dataset: a corpus
// encoded once by a tokenizer into shards of token ids that training
// memory-maps, as nanoGPT's prepare.py writes train.bin and val.bin.
//
// A prepared dataset is a directory DIR holding
//
//   - DIR/index.json, the dataset's index:
//
//     {"format":"gotrain-token-shards/1","tokenizer":"gpt2","vocab_size":50257,"eot":50256,
//     "dtype":"uint16","shards":[{"file":"train-000000.bin","split":"train","tokens":N,"sha256":"<hex>"}, …]}
//
//     "tokenizer" is the tokenizer spec as given to the writer (see
//     package tokenizer's Load), "eot" the end-of-text id appended to
//     every document or -1 if the tokenizer has none, and "dtype" uint16
//     when vocab_size <= 65536, uint32 otherwise. A split's shards are
//     listed in order; their concatenation is the split's token stream.
//
//   - each shard file: the raw little-endian token ids, no header
//     (nanoGPT's train.bin layout: np.memmap(path, dtype=np.uint16)
//     reads it), "tokens" of them, whose SHA-256 is "sha256".
//
// Everything is written atomically: each shard to a temporary file that
// is fsynced and renamed, index.json last, the same way. A directory
// without index.json is not a prepared dataset, and a temporary file
// (named ".*.tmp*") never looks like a shard.
//
// Writer writes a dataset, Prepare encodes documents (text files,
// directories, JSONL) into one with a pool of workers, ReadIndex reads
// the index and Open memory-maps a split, whose Windows are the
// training examples.
//
// On machines without a shared file system each host may hold only some
// of a split's shards: OpenNodeLocal finds out at start which rank can
// read which, deals each shard to one rank (or, when every host holds
// every shard, shards one window set as on a shared disk) and gives each
// rank's epoch the same length; its documentation states what an epoch
// reads and what it leaves out.
package shards

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Format is the index's "format": this package's layout, version 1.
const Format = "gotrain-token-shards/1"

// IndexFile is the name of the index in a dataset's directory.
const IndexFile = "index.json"

// The shard dtypes: the width of one token id on disk.
const (
	Uint16 = "uint16"
	Uint32 = "uint32"
)

// The splits a Prepare writes.
const (
	Train = "train"
	Val   = "val"
)

// ErrFormat is wrapped by the errors about a dataset that is not
// well-formed: an index that cannot be parsed or contradicts itself, a
// shard whose size does not match the index, a token id outside the
// vocabulary.
var ErrFormat = errors.New("shards: bad dataset")

// Index is a dataset's index.json.
type Index struct {
	Format    string  `json:"format"`
	Tokenizer string  `json:"tokenizer"`
	VocabSize int     `json:"vocab_size"`
	EOT       int     `json:"eot"`
	DType     string  `json:"dtype"`
	Shards    []Shard `json:"shards"`
}

// Shard is one shard file of an Index.
type Shard struct {
	File   string `json:"file"` // its name in the dataset's directory
	Split  string `json:"split"`
	Tokens int64  `json:"tokens"`
	SHA256 string `json:"sha256"` // of the file's bytes, lower-case hex
}

// DTypeFor returns the dtype of a vocabulary of vocab ids: uint16 when
// every id fits in 16 bits.
func DTypeFor(vocab int) string {
	if vocab <= 1<<16 {
		return Uint16
	}
	return Uint32
}

// Width returns the bytes of one token id of dtype, or 0 for a dtype
// that is neither Uint16 nor Uint32.
func Width(dtype string) int {
	switch dtype {
	case Uint16:
		return 2
	case Uint32:
		return 4
	}
	return 0
}

// IsDataset reports whether dir is a prepared dataset: a directory
// holding an index.json (which ReadIndex may still refuse).
func IsDataset(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, IndexFile))
	return err == nil && st.Mode().IsRegular()
}

// ReadIndex reads and checks dir's index.json. Its errors name the file
// and what is wrong; those about its content wrap ErrFormat.
func ReadIndex(dir string) (*Index, error) {
	path := filepath.Join(dir, IndexFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s is not a prepared dataset: it has no %s (see gotrain data prepare)", ErrFormat, dir, IndexFile)
		}
		return nil, fmt.Errorf("shards: %w", err)
	}
	var idx Index
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("%w: %s: not a dataset index: %v", ErrFormat, path, err)
	}
	if err := idx.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, path, err)
	}
	return &idx, nil
}

// check returns what makes idx not a valid index.
func (idx *Index) check() error {
	switch {
	case idx.Format != Format:
		return fmt.Errorf("format %q, want %q", idx.Format, Format)
	case idx.VocabSize < 1 || idx.VocabSize > 1<<32:
		return fmt.Errorf("vocab_size %d: want 1 to 2^32", idx.VocabSize)
	case idx.EOT < -1 || idx.EOT >= idx.VocabSize:
		return fmt.Errorf("eot %d: want -1 or an id below vocab_size %d", idx.EOT, idx.VocabSize)
	case idx.DType != DTypeFor(idx.VocabSize):
		return fmt.Errorf("dtype %q for vocab_size %d, want %q", idx.DType, idx.VocabSize, DTypeFor(idx.VocabSize))
	}
	seen := make(map[string]bool, len(idx.Shards))
	for i, s := range idx.Shards {
		switch {
		case s.File == "" || s.File != filepath.Base(s.File) || s.File == "." || s.File == ".." || s.File == IndexFile || strings.ContainsRune(s.File, '\\'):
			return fmt.Errorf("shard %d: file %q is not a file name in the dataset's directory", i, s.File)
		case seen[s.File]:
			return fmt.Errorf("shard %d: file %q is listed twice", i, s.File)
		case s.Split == "":
			return fmt.Errorf("shard %s: no split", s.File)
		case s.Tokens < 0:
			return fmt.Errorf("shard %s: tokens %d", s.File, s.Tokens)
		}
		if h, err := hex.DecodeString(s.SHA256); err != nil || len(h) != 32 {
			return fmt.Errorf("shard %s: sha256 %q is not 64 hex digits", s.File, s.SHA256)
		}
		seen[s.File] = true
	}
	return nil
}

// Files returns the files of split's shards, in order.
func (idx *Index) Files(split string) []string {
	var files []string
	for _, s := range idx.Shards {
		if s.Split == split {
			files = append(files, s.File)
		}
	}
	return files
}

// SplitTokens returns the tokens of split: the sum over its shards.
func (idx *Index) SplitTokens(split string) int64 {
	var n int64
	for _, s := range idx.Shards {
		if s.Split == split {
			n += s.Tokens
		}
	}
	return n
}

// shard returns the entry of file, or nil.
func (idx *Index) shard(file string) *Shard {
	for i := range idx.Shards {
		if idx.Shards[i].File == file {
			return &idx.Shards[i]
		}
	}
	return nil
}
