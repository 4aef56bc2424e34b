package data

import (
	"errors"
	"fmt"
)

// SequenceDataset is an indexable collection of token sequences of one
// length, each with a target per position: a language model's examples.
// A Loader made by NewSequenceLoader batches them.
//
// As for Dataset, Sequence must be safe to call concurrently with the
// dataset's other methods.
type SequenceDataset interface {
	// Len returns the number of sequences.
	Len() int
	// SeqLen returns the length T of every sequence.
	SeqLen() int
	// Sequence writes sequence i's token ids into x and its per-position
	// targets into y, each of length SeqLen. It panics if i is outside
	// [0, Len()) or a buffer has the wrong length.
	Sequence(i int, x, y []int)
}

// ErrTokens is wrapped by the errors of NewTokenWindows about the tokens
// it is given.
var ErrTokens = errors.New("data: bad token sequence")

// TokenWindows is a SequenceDataset of the windows of a token stream:
// example i is the T tokens starting at i·stride, and its targets are the
// same window shifted by one (each position predicts the next token), as
// a GPT trains. With stride 1 and a shuffling DistributedSampler every
// rank trains on random windows, disjoint across ranks within an epoch.
type TokenWindows struct {
	tokens []int
	t      int
	stride int
	n      int
}

// NewTokenWindows returns the windows of length t, stride apart, over
// tokens, whose ids must lie in [0, vocab). The tokens are shared, not
// copied. It returns an error wrapping ErrTokens naming the first id out
// of range, or if tokens are too few for one window (t+1 of them); it
// panics if t, stride or vocab is not positive.
func NewTokenWindows(tokens []int, vocab, t, stride int) (*TokenWindows, error) {
	if t < 1 || stride < 1 || vocab < 1 {
		panic(fmt.Sprintf("data: NewTokenWindows: sequence length %d, stride %d and vocabulary size %d must be positive", t, stride, vocab))
	}
	for i, id := range tokens {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("%w: token id %d at position %d is outside the vocabulary of size %d", ErrTokens, id, i, vocab)
		}
	}
	if len(tokens) < t+1 {
		return nil, fmt.Errorf("%w: %d tokens are too few for one window of %d (it needs %d with its targets)", ErrTokens, len(tokens), t, t+1)
	}
	return &TokenWindows{tokens: tokens, t: t, stride: stride, n: (len(tokens)-t-1)/stride + 1}, nil
}

// Len implements SequenceDataset.
func (w *TokenWindows) Len() int { return w.n }

// SeqLen implements SequenceDataset.
func (w *TokenWindows) SeqLen() int { return w.t }

// Sequence implements SequenceDataset.
func (w *TokenWindows) Sequence(i int, x, y []int) {
	if len(x) != w.t || len(y) != w.t {
		panic(fmt.Sprintf("data: TokenWindows.Sequence: buffers of %d and %d tokens for sequences of %d", len(x), len(y), w.t))
	}
	if uint(i) >= uint(w.n) {
		panic(fmt.Sprintf("data: TokenWindows.Sequence: index %d outside [0, %d)", i, w.n))
	}
	start := i * w.stride
	copy(x, w.tokens[start:start+w.t])
	copy(y, w.tokens[start+1:start+w.t+1])
}
