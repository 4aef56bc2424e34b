package data

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestTokenWindows(t *testing.T) {
	tokens := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, c := range []struct{ t, stride, n int }{{4, 1, 6}, {4, 4, 2}, {3, 2, 4}, {9, 1, 1}} {
		w, err := NewTokenWindows(tokens, 10, c.t, c.stride)
		if err != nil {
			t.Fatal(err)
		}
		if w.Len() != c.n || w.SeqLen() != c.t {
			t.Fatalf("T=%d stride=%d: Len %d SeqLen %d, want %d %d", c.t, c.stride, w.Len(), w.SeqLen(), c.n, c.t)
		}
		x, y := make([]int, c.t), make([]int, c.t)
		for i := range w.Len() {
			w.Sequence(i, x, y)
			for p := range c.t {
				if x[p] != i*c.stride+p || y[p] != x[p]+1 {
					t.Fatalf("T=%d stride=%d window %d: x %v y %v", c.t, c.stride, i, x, y)
				}
			}
		}
	}
}

func TestTokenWindowsRefusesBadTokens(t *testing.T) {
	_, err := NewTokenWindows([]int{1, 2, 300, 4, 5}, 256, 2, 1)
	if !errors.Is(err, ErrTokens) || err.Error() != "data: bad token sequence: token id 300 at position 2 is outside the vocabulary of size 256" {
		t.Fatalf("id out of range: err = %v", err)
	}
	_, err = NewTokenWindows([]int{1, -1}, 256, 1, 1)
	if !errors.Is(err, ErrTokens) {
		t.Fatalf("negative id: err = %v", err)
	}
	_, err = NewTokenWindows([]int{1, 2, 3}, 256, 3, 1)
	if !errors.Is(err, ErrTokens) || err.Error() != "data: bad token sequence: 3 tokens are too few for one window of 3 (it needs 4 with its targets)" {
		t.Fatalf("too short: err = %v", err)
	}
	expectPanic(t, "sequence length 0", func() { _, _ = NewTokenWindows([]int{1, 2}, 256, 0, 1) })
	w, _ := NewTokenWindows([]int{1, 2, 3}, 256, 2, 1)
	expectPanic(t, "buffers of 3 and 2", func() { w.Sequence(0, make([]int, 3), make([]int, 2)) })
	expectPanic(t, "index 1 outside [0, 1)", func() { w.Sequence(1, make([]int, 2), make([]int, 2)) })
}

// TestSequenceLoaderShardsWindows checks that two ranks' shuffled windows
// cover every window once per epoch between them, in [B, T] batches, with
// and without prefetching.
func TestSequenceLoaderShardsWindows(t *testing.T) {
	tokens := make([]int, 203)
	for i := range tokens {
		tokens[i] = i % 50
	}
	w, err := NewTokenWindows(tokens, 50, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, prefetch := range []int{0, 2} {
		var seen []int
		for rank := range 2 {
			s := NewDistributedSampler(w.Len(), 2, rank, Seed(3), DropLast(true))
			l := NewSequenceLoader(w, 16, s, Prefetch(prefetch))
			s.SetEpoch(1)
			for b := range l.Batches() {
				if len(b.Inputs) != b.Len()*8 || len(b.Targets) != len(b.Inputs) || b.T != 8 || b.X != nil {
					t.Fatalf("batch: %d inputs, %d targets, T %d for %d sequences", len(b.Inputs), len(b.Targets), b.T, b.Len())
				}
				for j, i := range b.Indices {
					for p := range 8 {
						if b.Inputs[j*8+p] != tokens[i+p] || b.Targets[j*8+p] != tokens[i+p+1] {
							t.Fatalf("window %d position %d: input %d target %d", i, p, b.Inputs[j*8+p], b.Targets[j*8+p])
						}
					}
				}
				seen = append(seen, b.Indices...)
			}
		}
		slices.Sort(seen)
		if len(seen) != w.Len()/2*2 || len(slices.Compact(slices.Clone(seen))) != len(seen) {
			t.Fatalf("prefetch %d: %d windows seen (%d distinct) of %d", prefetch, len(seen), len(slices.Compact(slices.Clone(seen))), w.Len())
		}
	}
}

func expectPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one containing %q", want)
		}
		if msg, _ := r.(string); !strings.Contains(msg, want) {
			t.Fatalf("panic %v, want one containing %q", r, want)
		}
	}()
	f()
}
