package data

import (
	"slices"
	"testing"
)

// Load assembles exactly the examples asked for, also more than a batch,
// and Examples is the dataset's size, not the sampler's share.
func TestLoaderLoad(t *testing.T) {
	ds := indexDataset(20)
	l := NewLoader(ds, 4, NewDistributedSampler(20, 4, 1), Prefetch(2))
	if got := l.Examples(); got != 20 {
		t.Fatalf("Examples() = %d, want 20", got)
	}
	for _, idx := range [][]int{{3, 1}, {0, 5, 9, 11, 13, 19}, {7}} {
		b := l.Load(idx)
		if !slices.Equal(b.Indices, idx) {
			t.Fatalf("Load(%v).Indices = %v", idx, b.Indices)
		}
		checkBatch(t, b)
		for j, i := range idx {
			if got := b.X.Data()[j*6]; got != float32(i*10) {
				t.Fatalf("Load(%v): example %d starts with %v, want %v", idx, j, got, float32(i*10))
			}
		}
	}
}
