package shards

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// byteEnc encodes each byte as its id, with 256 as the end of text.
type byteEnc struct{}

func (byteEnc) VocabSize() int { return 257 }
func (byteEnc) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := range len(s) {
		ids[i] = int(s[i])
	}
	return ids
}
func (byteEnc) EndOfText() (int, bool) { return 256, true }

// bigEnc has a vocabulary too large for uint16: rune r is id 60000+r%10000.
type bigEnc struct{}

func (bigEnc) VocabSize() int { return 70000 }
func (bigEnc) Encode(s string) []int {
	var ids []int
	for _, r := range s {
		ids = append(ids, 60000+int(r)%10000)
	}
	return ids
}
func (bigEnc) EndOfText() (int, bool) { return 0, false }

func write(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readAll returns every token of split, read from the files as nanoGPT's
// np.memmap would.
func readAll(t *testing.T, dir string, idx *Index, split string) []int {
	t.Helper()
	var ids []int
	w := Width(idx.DType)
	for _, f := range idx.Files(split) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(b); i += w {
			if w == 2 {
				ids = append(ids, int(binary.LittleEndian.Uint16(b[i:])))
			} else {
				ids = append(ids, int(binary.LittleEndian.Uint32(b[i:])))
			}
		}
	}
	return ids
}

func TestWriterRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		vocab int
		dtype string
	}{{300, Uint16}, {1 << 16, Uint16}, {1<<16 + 1, Uint32}} {
		dir := filepath.Join(t.TempDir(), "ds")
		w, err := Create(dir, "spec", tc.vocab, tc.vocab-1, 10)
		if err != nil {
			t.Fatal(err)
		}
		var train, val []int
		for i := range 37 {
			train = append(train, (i*7919)%tc.vocab)
		}
		train = append(train, tc.vocab-1)
		val = []int{1, 2, 3}
		if err := w.Write(Train, train[:15]); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(Val, val); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(Train, train[15:]); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
		idx, err := ReadIndex(dir)
		if err != nil {
			t.Fatal(err)
		}
		if idx.Format != Format || idx.DType != tc.dtype || idx.VocabSize != tc.vocab || idx.EOT != tc.vocab-1 || idx.Tokenizer != "spec" {
			t.Fatalf("index %+v", idx)
		}
		if got := idx.Files(Train); !slices.Equal(got, []string{"train-000000.bin", "train-000001.bin", "train-000002.bin", "train-000003.bin"}) {
			t.Fatalf("train shards %v", got)
		}
		if got := readAll(t, dir, idx, Train); !slices.Equal(got, train) {
			t.Fatalf("train tokens %v, want %v", got, train)
		}
		if got := readAll(t, dir, idx, Val); !slices.Equal(got, val) {
			t.Fatalf("val tokens %v, want %v", got, val)
		}
		for _, s := range idx.Shards {
			b, _ := os.ReadFile(filepath.Join(dir, s.File))
			h := sha256.Sum256(b)
			if hex.EncodeToString(h[:]) != s.SHA256 || int64(len(b)) != s.Tokens*int64(Width(tc.dtype)) {
				t.Fatalf("shard %+v: %d bytes, sha256 %x", s, len(b), h)
			}
			if err := VerifyFile(dir, idx, s); err != nil {
				t.Fatal(err)
			}
		}
		tok, err := Open(dir, Train)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Len() != int64(len(train)) {
			t.Fatalf("Len %d", tok.Len())
		}
		if err := tok.Verify(); err != nil {
			t.Fatal(err)
		}
		if err := tok.Close(); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp") {
				t.Fatalf("temporary file %s left", e.Name())
			}
		}
	}
}

// TestWindowsStayInTheirShard: each window is T consecutive tokens of one
// shard and its targets the next T; the count is the sum over shards of
// (n-T-1)/stride+1.
func TestWindowsStayInTheirShard(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, "bytes", 1000, -1, 100)
	if err != nil {
		t.Fatal(err)
	}
	// Shards of 100, 100 and 63 tokens; token i is i.
	stream := make([]int, 263)
	for i := range stream {
		stream[i] = i % 1000
	}
	if err := w.Write(Train, stream); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	tok, err := Open(dir, Train)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	for _, tc := range []struct{ T, stride, want int }{
		{8, 1, 92 + 92 + 55}, {8, 8, 12 + 12 + 7}, {62, 5, 8 + 8 + 1}, {63, 1, 37 + 37 + 0},
	} {
		win, err := tok.Windows(tc.T, tc.stride)
		if err != nil {
			t.Fatal(err)
		}
		if win.Len() != tc.want || win.SeqLen() != tc.T {
			t.Fatalf("T %d stride %d: %d windows, want %d", tc.T, tc.stride, win.Len(), tc.want)
		}
		x, y := make([]int, tc.T), make([]int, tc.T)
		var starts []int
		for i := range win.Len() {
			win.Sequence(i, x, y)
			for j := range tc.T {
				if x[j] != x[0]+j || y[j] != x[0]+j+1 {
					t.Fatalf("T %d stride %d window %d: x %v y %v", tc.T, tc.stride, i, x, y)
				}
			}
			// Never past a shard's end: the target of the last position
			// is in the window's shard.
			if x[0]/100 != (x[0]+tc.T)/100 {
				t.Fatalf("window %d crosses a shard boundary: %v", i, x)
			}
			starts = append(starts, x[0])
		}
		if starts[0] != 0 || starts[1] != tc.stride || !slices.IsSorted(starts) {
			t.Fatalf("window starts %v", starts)
		}
		if win.Err() != nil {
			t.Fatal(win.Err())
		}
	}
	if _, err := tok.Windows(100, 1); err == nil || !strings.Contains(err.Error(), "no window of 100 tokens") || !strings.Contains(err.Error(), "100 tokens") {
		t.Fatalf("windows longer than every shard: %v", err)
	}
}

// TestBadDatasets: every flaw of a dataset is an error naming the file.
func TestBadDatasets(t *testing.T) {
	good := func(t *testing.T) (string, *Index) {
		dir := t.TempDir()
		w, err := Create(dir, "bytes", 300, -1, 50)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int, 80)
		for i := range ids {
			ids[i] = i
		}
		if err := w.Write(Train, ids); err != nil {
			t.Fatal(err)
		}
		idx, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		return dir, idx
	}
	editIndex := func(t *testing.T, dir string, edit func(*Index)) {
		idx, err := ReadIndex(dir)
		if err != nil {
			t.Fatal(err)
		}
		edit(idx)
		b, _ := json.Marshal(idx)
		write(t, filepath.Join(dir, IndexFile), b)
	}
	t.Run("no-index", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Open(dir, Train); err == nil || !strings.Contains(err.Error(), dir+" is not a prepared dataset") {
			t.Fatalf("err = %v", err)
		}
	})
	for _, c := range []struct {
		name string
		edit func(*Index)
		want string
	}{
		{"format", func(i *Index) { i.Format = "other/1" }, `format "other/1"`},
		{"dtype", func(i *Index) { i.DType = Uint32 }, `dtype "uint32" for vocab_size 300`},
		{"path", func(i *Index) { i.Shards[0].File = "../x.bin" }, `file "../x.bin" is not a file name`},
		{"sha", func(i *Index) { i.Shards[0].SHA256 = "zz" }, "is not 64 hex digits"},
		{"eot", func(i *Index) { i.EOT = 300 }, "eot 300"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := good(t)
			editIndex(t, dir, c.edit)
			_, err := Open(dir, Train)
			if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), filepath.Join(dir, IndexFile)) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q naming the index", err, c.want)
			}
		})
	}
	t.Run("not-json", func(t *testing.T) {
		dir, _ := good(t)
		write(t, filepath.Join(dir, IndexFile), []byte("{"))
		if _, err := ReadIndex(dir); err == nil || !strings.Contains(err.Error(), "not a dataset index") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		dir, _ := good(t)
		path := filepath.Join(dir, "train-000001.bin")
		if err := os.Truncate(path, 59); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Train)
		if err == nil || !strings.Contains(err.Error(), path+" has 59 bytes, the index says 30 tokens of uint16 (60 bytes)") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing-shard", func(t *testing.T) {
		dir, _ := good(t)
		_ = os.Remove(filepath.Join(dir, "train-000000.bin"))
		if _, err := Open(dir, Train); err == nil || !strings.Contains(err.Error(), "train-000000.bin") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unlisted", func(t *testing.T) {
		dir, idx := good(t)
		if _, err := OpenFiles(dir, idx, []string{"train-000009.bin"}); err == nil || !strings.Contains(err.Error(), "train-000009.bin is not a shard of") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("id-outside-vocabulary", func(t *testing.T) {
		dir, _ := good(t)
		path := filepath.Join(dir, "train-000001.bin")
		b, _ := os.ReadFile(path)
		binary.LittleEndian.PutUint16(b[2*7:], 301)
		write(t, path, b)
		tok, err := Open(dir, Train)
		if err != nil {
			t.Fatal(err)
		}
		defer tok.Close()
		want := path + ": token id 301 at position 7 is outside the vocabulary of size 300"
		if err := tok.Verify(); err == nil || !strings.Contains(err.Error(), "SHA-256") {
			t.Fatalf("Verify: %v, want the checksum mismatch", err)
		}
		win, err := tok.Windows(4, 1)
		if err != nil {
			t.Fatal(err)
		}
		x, y := make([]int, 4), make([]int, 4)
		for i := range 46 { // the first shard's windows
			win.Sequence(i, x, y)
		}
		if win.Err() != nil {
			t.Fatalf("Err before the bad id was read: %v", win.Err())
		}
		win.Sequence(46+5, x, y) // tokens 5..9 of the second shard
		if err := win.Err(); err == nil || !strings.Contains(err.Error(), want) || x[2] != 301 {
			t.Fatalf("Err = %v, x = %v; want %q", err, x, want)
		}
	})
}

// TestPrepare: text files, a directory, JSONL and gzipped JSONL become
// one token stream, each document followed by the end of text, the same
// with 1 worker and 4, some documents held out.
func TestPrepare(t *testing.T) {
	in := t.TempDir()
	a := write(t, filepath.Join(in, "a.txt"), []byte("alpha\n"))
	write(t, filepath.Join(in, "d", "2.txt"), []byte("two"))
	write(t, filepath.Join(in, "d", "1.txt"), []byte("one"))
	write(t, filepath.Join(in, "d", ".hidden"), []byte("\xff"))
	write(t, filepath.Join(in, "d", "empty.txt"), nil)
	jl := write(t, filepath.Join(in, "docs.jsonl"), []byte("{\"text\":\"j1\",\"id\":1}\n\n{\"id\":2,\"text\":\"j\\u00e92\"}\r\n{\"text\":\"\"}\n"))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"text":"g1"}` + "\n" + `{"text":"g2"}`))
	zw.Close()
	jgz := write(t, filepath.Join(in, "docs.jsonl.gz"), gz.Bytes())
	inputs := []string{a, filepath.Join(in, "d"), jl, jgz}
	docs := []string{"alpha\n", "one", "two", "j1", "jé2", "g1", "g2"}

	var shas [][]string
	for _, workers := range []int{1, 4} {
		out := filepath.Join(t.TempDir(), "out")
		var progress bytes.Buffer
		idx, st, err := Prepare(context.Background(), out, byteEnc{}, inputs, Options{Tokenizer: "test", ValFraction: 0.3, Workers: workers, ShardTokens: 8, Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		// Documents 3 and 6 (from 0) are held out at 0.3: ⌊4·0.3⌋ >
		// ⌊3·0.3⌋ and ⌊7·0.3⌋ > ⌊6·0.3⌋.
		var train, val []int
		for i, d := range docs {
			ids := append(byteEnc{}.Encode(d), 256)
			if i == 3 || i == 6 {
				val = append(val, ids...)
			} else {
				train = append(train, ids...)
			}
		}
		if got := readAll(t, out, idx, Train); !slices.Equal(got, train) {
			t.Fatalf("%d workers: train %v, want %v", workers, got, train)
		}
		if got := readAll(t, out, idx, Val); !slices.Equal(got, val) {
			t.Fatalf("%d workers: val %v, want %v", workers, got, val)
		}
		if st.Documents != 7 || st.ValDocuments != 2 || st.TrainTokens != int64(len(train)) || st.ValTokens != int64(len(val)) {
			t.Fatalf("stats %+v", st)
		}
		if idx.EOT != 256 || idx.VocabSize != 257 || idx.Tokenizer != "test" || !IsDataset(out) {
			t.Fatalf("index %+v", idx)
		}
		if !strings.HasPrefix(progress.String(), "prepared: ") || !strings.Contains(progress.String(), "7 documents") {
			t.Fatalf("progress %q", progress.String())
		}
		var sha []string
		for _, s := range idx.Shards {
			sha = append(sha, s.File+" "+s.SHA256)
		}
		shas = append(shas, sha)
	}
	if !slices.Equal(shas[0], shas[1]) {
		t.Fatalf("1 worker wrote %v, 4 workers %v", shas[0], shas[1])
	}
}

// TestPrepareSkipsItsOutput: a dataset written inside an input directory
// is not read as input on the next prepare.
func TestPrepareSkipsItsOutput(t *testing.T) {
	in := t.TempDir()
	write(t, filepath.Join(in, "a.txt"), []byte("text"))
	out := filepath.Join(in, "ds")
	for range 2 {
		_, st, err := Prepare(context.Background(), out, byteEnc{}, []string{in}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Documents != 1 || st.TrainTokens != 5 {
			t.Fatalf("stats %+v: the dataset was read as input", st)
		}
	}
}

// TestPrepareLoneDocument: one document is split by tokens, its last
// ValFraction held out, as nanoGPT's shakespeare prepare.py.
func TestPrepareLoneDocument(t *testing.T) {
	text := strings.Repeat("0123456789", 10)
	in := write(t, filepath.Join(t.TempDir(), "in.txt"), []byte(text))
	out := t.TempDir()
	idx, st, err := Prepare(context.Background(), out, byteEnc{}, []string{in}, Options{ValFraction: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	ids := append(byteEnc{}.Encode(text), 256)
	// 101 tokens: int(101·0.25) = 25 held out.
	if got := readAll(t, out, idx, Train); !slices.Equal(got, ids[:76]) {
		t.Fatalf("train %v", got)
	}
	if got := readAll(t, out, idx, Val); !slices.Equal(got, ids[76:]) {
		t.Fatalf("val %v", got)
	}
	if st.Documents != 1 || st.ValDocuments != 1 || st.TrainTokens != 76 || st.ValTokens != 25 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPrepareUint32(t *testing.T) {
	in := write(t, filepath.Join(t.TempDir(), "in.txt"), []byte("aé€"))
	out := t.TempDir()
	idx, _, err := Prepare(context.Background(), out, bigEnc{}, []string{in}, Options{Tokenizer: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if idx.DType != Uint32 || idx.EOT != -1 {
		t.Fatalf("index %+v", idx)
	}
	want := bigEnc{}.Encode("aé€")
	if got := readAll(t, out, idx, Train); !slices.Equal(got, want) || want[2] <= 1<<16 {
		t.Fatalf("tokens %v, want %v", got, want)
	}
	if st, _ := os.Stat(filepath.Join(out, "train-000000.bin")); st.Size() != 12 {
		t.Fatalf("shard of %d bytes, want 3 uint32", st.Size())
	}
}

// TestPrepareBadInput: each bad input is one error naming file:line, and
// the directory is left without an index (a dataset there before stops
// being one) and without temporary files.
func TestPrepareBadInput(t *testing.T) {
	in := t.TempDir()
	good := write(t, filepath.Join(in, "good.txt"), []byte(strings.Repeat("good text\n", 100)))
	for _, c := range []struct {
		name, content, want string
		field               string
	}{
		{"latin1.txt", "line one\ncaf\xe9\n", ":2: not UTF-8 text (invalid byte 0xe9 at offset 12)", ""},
		{"bad.jsonl", "{\"text\":\"a\"}\n{\"text\":\"caf\xe9\"}\n", ":2: not UTF-8 text (invalid byte 0xe9 at offset 12)", ""},
		{"notjson.jsonl", "{\"text\":\"a\"}\n\n{text: a}\n", ":3: not a JSON object", ""},
		{"array.jsonl", "[1, 2]\n", ":1: not a JSON object", ""},
		{"nofield.jsonl", "{\"body\":\"a\"}\n", `:1: no field "text"`, ""},
		{"other.jsonl", "{\"text\":\"a\"}\n", `:1: no field "content"`, "content"},
		{"number.jsonl", "{\"text\":3}\n", `:1: field "text" is not a string`, ""},
		{"missing.txt", "", ": cannot be read: no such file or directory", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(in, c.name)
			if c.name != "missing.txt" {
				write(t, path, []byte(c.content))
			}
			out := t.TempDir()
			if _, _, err := Prepare(context.Background(), out, byteEnc{}, []string{good}, Options{}); err != nil {
				t.Fatal(err)
			}
			_, _, err := Prepare(context.Background(), out, byteEnc{}, []string{good, path, good}, Options{JSONLField: c.field, Workers: 3})
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), path+c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want %q", err, path+c.want)
			}
			checkNotDataset(t, out)
		})
	}
}

// checkNotDataset fails unless dir has no index and no temporary file.
func checkNotDataset(t *testing.T, dir string) {
	t.Helper()
	if IsDataset(dir) {
		t.Fatalf("%s has an index", dir)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("temporary file %s left", e.Name())
		}
	}
}

// cancelEnc cancels its context at its n-th Encode.
type cancelEnc struct {
	byteEnc
	n      int64
	calls  atomic.Int64
	cancel func()
}

func (e *cancelEnc) Encode(s string) []int {
	if e.calls.Add(1) == e.n {
		e.cancel()
	}
	return e.byteEnc.Encode(s)
}

// TestPrepareCancelled: a prepare stopped midway (its context cancelled
// after some shards were complete) leaves no index.
func TestPrepareCancelled(t *testing.T) {
	var lines strings.Builder
	for i := range 20000 {
		lines.WriteString(`{"text":"document number ` + strings.Repeat("x", i%50) + `"}` + "\n")
	}
	in := write(t, filepath.Join(t.TempDir(), "in.jsonl"), []byte(lines.String()))
	defer func(b int64) { chunkBytes = b }(chunkBytes)
	chunkBytes = 4096
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	enc := &cancelEnc{n: 15000, cancel: cancel}
	_, _, err := Prepare(ctx, out, enc, []string{in}, Options{ShardTokens: 1000, Workers: 2})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	checkNotDataset(t, out)
	if ents, _ := os.ReadDir(out); len(ents) == 0 {
		t.Fatal("no shard was complete before the cancellation: the test does not test an interrupted write")
	}
}

// TestCreateReplacesADataset: a new dataset in a directory removes the
// old one's index, shards and a killed writer's temporary files, and
// leaves other files alone.
func TestCreateReplacesADataset(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{IndexFile, "train-000007.bin", "val-000000.bin", ".train-000001.bin.tmp123", ".index.json.tmp9", "notes.txt"} {
		write(t, filepath.Join(dir, name), []byte("x"))
	}
	w, err := Create(dir, "bytes", 256, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "notes.txt" {
		t.Fatalf("left %v", ents)
	}
	w.Abort()
}
