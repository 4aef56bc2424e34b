// Package text turns UTF-8 text into the token ids a language model
// trains on: a byte-level tokenizer and the checks a corpus file must
// pass (not empty, valid UTF-8), each failure an error naming the file
// and what is wrong.
//
// With data.NewTokenWindows the tokens become a SequenceDataset of
// windows with next-token targets:
//
//	corpus, err := text.ReadCorpus("input.txt")
//	tok := text.ByteTokenizer{}
//	ds, err := data.NewTokenWindows(tok.Encode(corpus), tok.VocabSize(), 128, 1)
package text

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// ErrCorpus is wrapped by the errors about a corpus that cannot be
// trained on.
var ErrCorpus = errors.New("text: bad corpus")

// A CorpusError is a corpus that cannot be trained on; it wraps ErrCorpus.
// A program that names the file itself (a command line's flag) reports
// Name and Problem, the rest of the message being the package's.
type CorpusError struct {
	Name    string // the corpus file, or whatever names the text
	Problem string // what is wrong, after the name: "is empty"
}

func (e *CorpusError) Error() string { return ErrCorpus.Error() + ": " + e.Name + " " + e.Problem }

// Unwrap returns ErrCorpus.
func (e *CorpusError) Unwrap() error { return ErrCorpus }

// ByteTokenizer is the byte-level tokenizer: each byte of the UTF-8 text
// is one token, so its vocabulary is the 256 byte values and any text
// round-trips exactly.
type ByteTokenizer struct{}

// VocabSize returns 256.
func (ByteTokenizer) VocabSize() int { return 256 }

// Encode returns the bytes of s as token ids.
func (ByteTokenizer) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := range len(s) {
		ids[i] = int(s[i])
	}
	return ids
}

// Decode returns the text of ids, or an error naming the first id outside
// the vocabulary. A model's samples may split a multi-byte character: the
// bytes are returned as they are (see Printable).
func (ByteTokenizer) Decode(ids []int) (string, error) {
	b := make([]byte, len(ids))
	for i, id := range ids {
		if id < 0 || id > 255 {
			return "", fmt.Errorf("text: token id %d at position %d is outside the vocabulary of size 256", id, i)
		}
		b[i] = byte(id)
	}
	return string(b), nil
}

// Printable replaces the invalid UTF-8 in s (a split character at a
// sample's ends, bytes a model made up) with U+FFFD.
func Printable(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// ReadCorpus reads the text file at path and checks it with Check.
func ReadCorpus(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("text: reading the corpus: %w", err)
	}
	if err := Check(path, b); err != nil {
		return "", err
	}
	return string(b), nil
}

// Check returns a *CorpusError naming name if b is empty or not valid
// UTF-8 (with the offset of the first bad byte).
func Check(name string, b []byte) error {
	if len(b) == 0 {
		return &CorpusError{Name: name, Problem: "is empty"}
	}
	if !utf8.Valid(b) {
		off := 0
		for off < len(b) {
			r, size := utf8.DecodeRune(b[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return &CorpusError{Name: name, Problem: fmt.Sprintf("is not UTF-8 text (invalid byte 0x%02x at offset %d)", b[off], off)}
	}
	return nil
}
