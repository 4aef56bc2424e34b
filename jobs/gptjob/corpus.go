package gptjob

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/data/shards"
	"github.com/gotrain/gotrain/data/text"
	"github.com/gotrain/gotrain/data/tokenizer"
	"github.com/gotrain/gotrain/harness"
)

// corpus is what the job trains and validates on: the windows of a text
// (byte-level) or of a prepared dataset's memory-mapped shards.
type corpus struct {
	name         string
	vocab        int
	train, valid data.SequenceDataset
	tokens       int // in the training split, for the log
	// dataErr is the first bad token id the windows read (shards), or nil.
	dataErr func() error
	// spec is the prepared dataset's tokenizer spec; "" for bytes.
	spec   string
	closer func() error
	// sampler orders a prepared dataset's train windows (see
	// shards.OpenNodeLocal); nil for a text.
	sampler harness.Sampler
}

// trainOpener opens this rank's share of a prepared dataset's train
// split, windows of T tokens, T apart; nil checks the split from the
// index alone, as a launcher does, which may hold none of the shards.
type trainOpener func(dir string, T int) (*shards.NodeLocal, error)

// nodeLocal opens the train split from the shards this rank's host
// holds, dealt across the job's ranks (shards.OpenNodeLocal): the same
// windows and sampler as one shared disk when every host holds them all.
func (j *job) nodeLocal(ctx context.Context) trainOpener {
	return func(dir string, T int) (*shards.NodeLocal, error) {
		var g shards.Group // a nil *distributed.Group would not be a nil Group
		if pg := j.run.Group(); pg != nil {
			g = pg
		}
		return shards.OpenNodeLocal(ctx, g, dir, shards.Train, T, T, shards.NodeLocalOptions{Seed: j.cfg.Seed, Verify: j.cfg.VerifyShards, Logger: j.log})
	}
}

// close releases the shards' mappings.
func (c *corpus) close() error {
	if c.closer == nil {
		return nil
	}
	return c.closer()
}

// openCorpus opens the data at path with windows of T tokens: a
// directory holding a prepared dataset (see package shards), a UTF-8 text
// file, or the shipped corpus for "".
func openCorpus(path string, T int, open trainOpener) (*corpus, error) {
	if path != "" {
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			return openShards(path, T, open)
		}
	}
	name, text, err := readCorpus(path)
	if err != nil {
		return nil, err
	}
	train, valid, err := windows(name, text, T)
	if err != nil {
		return nil, err
	}
	return &corpus{name: name, vocab: vocabSize, train: train, valid: valid, tokens: len(text),
		dataErr: func() error { return nil }}, nil
}

// openShards maps the dataset dir's "train" and "val" splits. The
// training windows are T tokens, T apart: an epoch reads every token
// once, and the sampler's permutation holds one index per T tokens (8/T
// bytes per token, not the 8 bytes of a window at every position, which
// for a corpus of billions of tokens would outweigh the shards
// themselves). The validation windows are T apart too. The train split
// is opened by open, from the shards this rank's host holds.
func openShards(dir string, T int, open trainOpener) (_ *corpus, err error) {
	idx, err := shards.ReadIndex(dir)
	if err != nil {
		return nil, fmt.Errorf("gptjob: %w", err)
	}
	train := &shards.NodeLocal{}
	if open == nil {
		err = checkTrainIndex(dir, idx, T)
	} else {
		train, err = open(dir, T)
	}
	if err != nil {
		return nil, fmt.Errorf("gptjob: %w", err)
	}
	valid, err := shards.Open(dir, shards.Val)
	if err != nil {
		_ = train.Close()
		return nil, fmt.Errorf("gptjob: %w", err)
	}
	c := &corpus{name: dir, vocab: idx.VocabSize, spec: idx.Tokenizer, tokens: int(idx.SplitTokens(shards.Train)),
		closer: func() error { return errors.Join(train.Close(), valid.Close()) }}
	defer func() {
		if err != nil {
			_ = c.close()
		}
	}()
	if idx.SplitTokens(shards.Val) == 0 {
		return nil, fmt.Errorf("gptjob: %w", &text.CorpusError{Name: dir, Problem: "has no validation tokens (its val split is empty): prepare it with more documents or a larger --val-fraction"})
	}
	tw := train.Windows
	vw, err := valid.Windows(T, T)
	if err != nil {
		return nil, fmt.Errorf("gptjob: validation split: %w", err)
	}
	c.valid, c.sampler = vw, train.Sampler
	if tw != nil {
		c.train = tw
	}
	c.dataErr = func() error {
		if tw != nil {
			if err := tw.Err(); err != nil {
				return err
			}
		}
		return vw.Err()
	}
	return c, nil
}

// checkTrainIndex is the launcher's check of the train split, from the
// index: the hosts, not this machine, may hold its shards.
func checkTrainIndex(dir string, idx *shards.Index, T int) error {
	n, longest := 0, int64(0)
	for _, s := range idx.Shards {
		if s.Split == shards.Train {
			n, longest = n+1, max(longest, s.Tokens)
		}
	}
	if longest > int64(T) {
		return nil
	}
	return fmt.Errorf("training split: %w: %s: no window of %d tokens and its target: the longest of the %d shards has %d tokens",
		shards.ErrFormat, dir, T, n, longest)
}

// dataVocab returns the vocabulary of the data at path: its index's for
// a prepared dataset, 256 bytes otherwise (or if the index cannot be
// read, which opening the data reports).
func dataVocab(path string) int {
	if path != "" && shards.IsDataset(path) {
		if idx, err := shards.ReadIndex(path); err == nil {
			return idx.VocabSize
		}
	}
	return vocabSize
}

// decoder turns sampled ids into text.
type decoder interface {
	Decode(ids []int) (string, error)
	Encode(text string) []int
}

// sampleTokenizer returns the tokenizer that decodes c's samples: the
// prepared dataset's, or bytes.
func (c *corpus) sampleTokenizer() (decoder, error) {
	if c.spec == "" {
		return text.ByteTokenizer{}, nil
	}
	tok, err := tokenizer.Load(c.spec)
	if err != nil {
		return nil, fmt.Errorf("gptjob: %s: the tokenizer of its index, for the sample: %w", c.name, err)
	}
	if tok.VocabSize() != c.vocab {
		return nil, fmt.Errorf("gptjob: %s: its tokenizer %q has %d ids, the index says %d", c.name, c.spec, tok.VocabSize(), c.vocab)
	}
	return tok, nil
}

// samplePrompt is the context sampling starts from: a newline, as
// nanoGPT's sample.py, or the end of text if the newline does not encode.
func samplePrompt(tok decoder, vocab int) []int {
	ids := tok.Encode("\n")
	if len(ids) > 0 {
		ok := true
		for _, id := range ids {
			ok = ok && id >= 0 && id < vocab
		}
		if ok {
			return ids
		}
	}
	if t, isTok := tok.(tokenizer.Tokenizer); isTok {
		if eot, ok := t.EndOfText(); ok {
			return []int{eot}
		}
	}
	return []int{0}
}
