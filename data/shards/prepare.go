package shards

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Encoder is what Prepare needs of a tokenizer; package tokenizer's
// Tokenizer is one. Encode must be safe for concurrent use.
type Encoder interface {
	VocabSize() int
	Encode(text string) []int
	EndOfText() (id int, ok bool)
}

// Options are Prepare's settings. The zero value of each field is the
// default its comment gives.
type Options struct {
	// Tokenizer is the tokenizer's spec, recorded in the index for the
	// programs that decode the tokens (see package tokenizer's Load).
	Tokenizer string
	// ValFraction is the fraction of documents held out for the "val"
	// split, spread evenly: document i (counting from 0, in input order)
	// is held out when ⌊(i+1)·f⌋ > ⌊i·f⌋, so the last of every 1/f
	// documents. A lone document (one text file) is split instead: its
	// last f of tokens are held out, as nanoGPT's shakespeare
	// prepare.py. 0 holds none out.
	ValFraction float64
	// JSONLField is the field of a JSONL line that holds its document;
	// default "text".
	JSONLField string
	// ShardTokens is the tokens of a full shard; default
	// DefaultShardTokens.
	ShardTokens int64
	// Workers encode documents in parallel; default runtime.GOMAXPROCS.
	Workers int
	// Progress, if not nil, receives a line about the bytes read and
	// the tokens written every ProgressEvery (default 1s) and at the end.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// Stats are what Prepare read and wrote.
type Stats struct {
	Documents    int   // with at least one token
	ValDocuments int   // of Documents, held out (1 for a lone document split by tokens)
	Bytes        int64 // of the documents' text
	TrainTokens  int64
	ValTokens    int64
	Elapsed      time.Duration
}

// InputError is a document Prepare cannot read: a file that cannot be
// read, text that is not UTF-8, a JSONL line that is not JSON or lacks
// the field.
type InputError struct {
	File    string
	Line    int // 0 for the whole file
	Problem string
}

func (e *InputError) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Problem
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Problem)
}

// Prepare encodes the documents of inputs with enc into a dataset in dir
// (see the package doc), each document followed by enc's end-of-text id
// if it has one, as nanoGPT's prepare.py. An input is a text file (one
// document), a JSONL file (.jsonl or .jsonl.gz: a document per line, in
// the field o.JSONLField; blank lines are skipped) or a directory, whose
// files are taken in lexical order (names starting with "." and dir
// itself are skipped).
//
// Documents are encoded by o.Workers goroutines; the shards are the same
// whatever their number. The first bad input, in input order, stops
// Prepare with an *InputError; on any error, ctx's included, dir holds
// no index.json (and no temporary file), so it is not a dataset.
func Prepare(ctx context.Context, dir string, enc Encoder, inputs []string, o Options) (*Index, Stats, error) {
	start := time.Now()
	if o.JSONLField == "" {
		o.JSONLField = "text"
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	if !(o.ValFraction >= 0 && o.ValFraction < 1) {
		return nil, Stats{}, fmt.Errorf("shards: validation fraction %v: want 0 <= f < 1", o.ValFraction)
	}
	if len(inputs) == 0 {
		return nil, Stats{}, errors.New("shards: no input")
	}
	eot, hasEOT := enc.EndOfText()
	if !hasEOT {
		eot = -1
	}
	w, err := Create(dir, o.Tokenizer, enc.VocabSize(), eot, o.ShardTokens)
	if err != nil {
		return nil, Stats{}, err
	}
	p := &pipeline{enc: enc, o: o, eot: eot, out: dir}
	st, err := p.run(ctx, w, inputs)
	st.Elapsed = time.Since(start)
	if err == nil && st.Documents == 0 {
		err = errors.New("shards: the inputs hold no document with text")
	}
	if err != nil {
		w.Abort()
		return nil, st, err
	}
	idx, err := w.Close()
	if err != nil {
		return nil, st, err
	}
	p.progress(st, true)
	return idx, st, nil
}

// pipeline is one Prepare: a reader goroutine cuts the inputs into
// chunks of documents, workers encode them, and the caller's goroutine
// writes the chunks' tokens in input order.
type pipeline struct {
	enc Encoder
	o   Options
	eot int
	out string // the dataset's directory, skipped in the inputs
}

// document is one document to encode: text, or a JSONL line whose field
// holds it.
type document struct {
	file  string
	line  int // 0 for a whole file
	raw   []byte
	jsonl bool
}

// chunk is a run of documents, about chunkBytes of them, and where its
// encoding arrives.
type chunk struct {
	docs   []document
	bytes  int64
	err    error // the reader's: the chunk ends there
	result chan encoded
}

// encoded is a chunk's tokens: document i's are ids[ends[i-1]:ends[i]].
type encoded struct {
	ids  []int
	ends []int
	err  error
}

// chunkBytes is the text in a chunk: large enough that the hand-over
// costs nothing next to encoding it. Tests lower it.
var chunkBytes int64 = 1 << 20

func (p *pipeline) run(ctx context.Context, w *Writer, inputs []string) (Stats, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	work := make(chan *chunk)
	ordered := make(chan *chunk, 2*p.o.Workers)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(work)
		defer close(ordered)
		p.read(ctx, inputs, work, ordered)
	}()
	for range p.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				c.result <- p.encode(c.docs)
			}
		}()
	}
	var st Stats
	sink := &splitter{w: w, f: p.o.ValFraction, st: &st}
	start := time.Now()
	last := start
	for c := range ordered {
		var r encoded
		if len(c.docs) > 0 {
			select {
			case r = <-c.result:
			case <-ctx.Done():
				return st, fmt.Errorf("shards: %w", ctx.Err())
			}
		}
		if r.err != nil {
			return st, r.err
		}
		lo := 0
		for _, hi := range r.ends {
			if hi > lo {
				if err := sink.add(r.ids[lo:hi]); err != nil {
					return st, err
				}
			}
			lo = hi
		}
		st.Bytes += c.bytes
		if c.err != nil {
			return st, c.err
		}
		if time.Since(last) >= p.o.ProgressEvery {
			last = time.Now()
			st.Elapsed = last.Sub(start)
			p.progress(st, false)
		}
	}
	if err := ctx.Err(); err != nil {
		return st, fmt.Errorf("shards: %w", err)
	}
	return st, sink.flush()
}

// splitter sends each document to its split (see Options.ValFraction).
// The first document waits for a second: a lone document is split by
// its tokens instead.
type splitter struct {
	w     *Writer
	f     float64
	st    *Stats
	first []int // the first document while it is the only one
}

// add writes the next document's ids.
func (s *splitter) add(ids []int) error {
	if s.st.Documents == 0 {
		s.first = ids
		s.st.Documents++
		return nil
	}
	if s.first != nil {
		if err := s.write(Train, s.first); err != nil {
			return err
		}
		s.first = nil
	}
	split := Train
	if math.Floor(float64(s.st.Documents+1)*s.f) > math.Floor(float64(s.st.Documents)*s.f) {
		split = Val
		s.st.ValDocuments++
	}
	s.st.Documents++
	return s.write(split, ids)
}

// flush writes a lone document: its first 1-f of tokens to the training
// split, the rest to val, as nanoGPT's shakespeare prepare.py.
func (s *splitter) flush() error {
	if s.first == nil {
		return nil
	}
	cut := len(s.first) - int(float64(len(s.first))*s.f)
	if err := s.write(Train, s.first[:cut]); err != nil {
		return err
	}
	if cut < len(s.first) {
		s.st.ValDocuments++ // a part of one
		return s.write(Val, s.first[cut:])
	}
	return nil
}

// write writes ids to split and counts them.
func (s *splitter) write(split string, ids []int) error {
	if err := s.w.Write(split, ids); err != nil {
		return err
	}
	if split == Val {
		s.st.ValTokens += int64(len(ids))
	} else {
		s.st.TrainTokens += int64(len(ids))
	}
	return nil
}

// progress prints a line about st.
func (p *pipeline) progress(st Stats, final bool) {
	if p.o.Progress == nil {
		return
	}
	what := "prepare:"
	if final {
		what = "prepared:"
	}
	secs := max(st.Elapsed.Seconds(), 1e-9)
	fmt.Fprintf(p.o.Progress, "%s %.1f MB read in %.1fs (%.1f MB/s), %d documents, %d tokens (%.0f tokens/s), %d train, %d val\n",
		what, float64(st.Bytes)/1e6, st.Elapsed.Seconds(), float64(st.Bytes)/1e6/secs, st.Documents,
		st.TrainTokens+st.ValTokens, float64(st.TrainTokens+st.ValTokens)/secs, st.TrainTokens, st.ValTokens)
}

// encode encodes a chunk's documents, stopping at the first bad one.
func (p *pipeline) encode(docs []document) encoded {
	var r encoded
	for _, d := range docs {
		text, err := p.text(d)
		if err != nil {
			r.err = err
			return r
		}
		if text != "" {
			r.ids = append(r.ids, p.enc.Encode(text)...)
			if p.eot >= 0 {
				r.ids = append(r.ids, p.eot)
			}
		}
		r.ends = append(r.ends, len(r.ids))
	}
	return r
}

// text is d's document, checked.
func (p *pipeline) text(d document) (string, error) {
	if !d.jsonl {
		if err := checkUTF8(d.raw); err != nil {
			line := 1 + bytes.Count(d.raw[:err.off], []byte{'\n'})
			return "", &InputError{File: d.file, Line: line, Problem: err.Error()}
		}
		return string(d.raw), nil
	}
	if err := checkUTF8(d.raw); err != nil {
		return "", &InputError{File: d.file, Line: d.line, Problem: err.Error()}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(d.raw, &fields); err != nil {
		return "", &InputError{File: d.file, Line: d.line, Problem: "not a JSON object: " + err.Error()}
	}
	v, ok := fields[p.o.JSONLField]
	if !ok {
		return "", &InputError{File: d.file, Line: d.line, Problem: fmt.Sprintf("no field %q", p.o.JSONLField)}
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", &InputError{File: d.file, Line: d.line, Problem: fmt.Sprintf("field %q is not a string", p.o.JSONLField)}
	}
	return s, nil
}

// utf8Error is the first invalid byte of a text.
type utf8Error struct {
	off int
	b   byte
}

func (e *utf8Error) Error() string {
	return fmt.Sprintf("not UTF-8 text (invalid byte 0x%02x at offset %d)", e.b, e.off)
}

// checkUTF8 returns the first invalid byte of b, or nil.
func checkUTF8(b []byte) *utf8Error {
	if utf8.Valid(b) {
		return nil
	}
	for off := 0; off < len(b); {
		r, size := utf8.DecodeRune(b[off:])
		if r == utf8.RuneError && size == 1 {
			return &utf8Error{off: off, b: b[off]}
		}
		off += size
	}
	return nil
}

// read cuts inputs into chunks, each sent to the workers and, in order,
// to the writer; a chunk with an error is the last.
func (p *pipeline) read(ctx context.Context, inputs []string, work, ordered chan<- *chunk) {
	cur := &chunk{}
	send := func(c *chunk) bool {
		c.result = make(chan encoded, 1)
		if len(c.docs) > 0 {
			select {
			case work <- c:
			case <-ctx.Done():
				return false
			}
		}
		select {
		case ordered <- c:
			return c.err == nil
		case <-ctx.Done():
			return false
		}
	}
	add := func(d document) bool {
		cur.docs = append(cur.docs, d)
		cur.bytes += int64(len(d.raw))
		if cur.bytes < chunkBytes {
			return true
		}
		c := cur
		cur = &chunk{}
		return send(c)
	}
	fail := func(err error) {
		cur.err = err
		send(cur)
	}
	outAbs, _ := filepath.Abs(p.out)
	for _, in := range inputs {
		files, err := p.files(in, outAbs)
		if err != nil {
			fail(err)
			return
		}
		for _, f := range files {
			if err := p.readFile(ctx, f, add); err != nil {
				fail(err)
				return
			}
			if ctx.Err() != nil {
				return
			}
		}
	}
	if len(cur.docs) > 0 {
		send(cur)
	}
}

// files returns the files of the input in: itself, or a directory's
// files in lexical order.
func (p *pipeline) files(in, outAbs string) ([]string, error) {
	st, err := os.Stat(in)
	if err != nil {
		return nil, &InputError{File: in, Problem: "cannot be read: " + unwrapPath(err)}
	}
	if !st.IsDir() {
		return []string{in}, nil
	}
	var files []string
	err = filepath.WalkDir(in, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return &InputError{File: path, Problem: "cannot be read: " + unwrapPath(err)}
		}
		if path != in && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if abs, _ := filepath.Abs(path); abs == outAbs {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// unwrapPath is err's message without the path an *fs.PathError repeats.
func unwrapPath(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// readFile hands the documents of the file path to add, which returns
// false when reading is to stop.
func (p *pipeline) readFile(ctx context.Context, path string, add func(document) bool) error {
	jsonl := strings.HasSuffix(path, ".jsonl") || strings.HasSuffix(path, ".jsonl.gz")
	if !jsonl {
		b, err := os.ReadFile(path)
		if err != nil {
			return &InputError{File: path, Problem: "cannot be read: " + unwrapPath(err)}
		}
		add(document{file: path, raw: b})
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return &InputError{File: path, Problem: "cannot be read: " + unwrapPath(err)}
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return &InputError{File: path, Problem: "not gzip: " + err.Error()}
		}
		defer gz.Close()
		r = gz
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			if !add(document{file: path, line: line, raw: b, jsonl: true}) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &InputError{File: path, Line: line, Problem: "cannot be read: " + err.Error()}
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}
