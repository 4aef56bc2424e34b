package data

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWorkersGiveTheSameBatches: batches assembled on several goroutines
// hold the same examples in the same places as on one, with and without
// prefetching, for batch sizes that do and do not divide among them.
func TestWorkersGiveTheSameBatches(t *testing.T) {
	ds := indexDataset(23)
	collect := func(opts ...Option) (xs [][]float32, ys [][]int) {
		s := NewDistributedSampler(ds.Len(), 1, 0, Seed(3))
		for b := range NewLoader(ds, 5, s, opts...).Batches() {
			checkBatch(t, b)
			xs = append(xs, slices.Clone(b.X.Data()))
			ys = append(ys, slices.Clone(b.Y))
		}
		return xs, ys
	}
	wantX, wantY := collect(Prefetch(0))
	for _, opts := range [][]Option{
		{Workers(1)}, {Workers(2), Prefetch(0)}, {Workers(3)}, {Workers(5), Prefetch(1)}, {Workers(8)},
	} {
		gotX, gotY := collect(opts...)
		if len(gotX) != len(wantX) {
			t.Fatalf("%d options: %d batches, want %d", len(opts), len(gotX), len(wantX))
		}
		for k := range wantX {
			if !slices.Equal(gotX[k], wantX[k]) || !slices.Equal(gotY[k], wantY[k]) {
				t.Fatalf("Workers with %d options: batch %d differs from the one-goroutine batch", len(opts), k)
			}
		}
	}
}

// barrierDataset's Example returns only once n calls are in flight at
// once: a loader that called them one after another would never finish
// the batch (the test fails after a minute instead of hanging).
type barrierDataset struct {
	*TensorDataset
	n       int
	mu      sync.Mutex
	waiting int
	release chan struct{}
	timeout chan struct{}
}

func (d *barrierDataset) Example(i int, x []float32) int {
	d.mu.Lock()
	d.waiting++
	if d.waiting == d.n {
		close(d.release)
	}
	d.mu.Unlock()
	select {
	case <-d.release:
	case <-d.timeout:
		panic("Example calls were not concurrent")
	}
	return d.TensorDataset.Example(i, x)
}

// TestWorkersCallExampleConcurrently: with Workers(n), n examples of a
// batch are assembled at the same time.
func TestWorkersCallExampleConcurrently(t *testing.T) {
	ds := &barrierDataset{TensorDataset: indexDataset(4), n: 4, release: make(chan struct{}), timeout: make(chan struct{})}
	timer := time.AfterFunc(time.Minute, func() { close(ds.timeout) })
	defer timer.Stop()
	for b := range NewLoader(ds, 4, NewSequentialSampler(4), Workers(4), Prefetch(0)).Batches() {
		checkBatch(t, b)
	}
}

type panicAt struct {
	*TensorDataset
	bad int
}

func (d panicAt) Example(i int, x []float32) int {
	if i == d.bad {
		panic(fmt.Sprintf("cannot read example %d", i))
	}
	return d.TensorDataset.Example(i, x)
}

// TestWorkersReraisePanics: a panic in one of the goroutines reaches the
// loop that ranges over the batches, with its message, instead of
// crashing the process.
func TestWorkersReraisePanics(t *testing.T) {
	for _, prefetch := range []int{0, 2} {
		got := func() (r any) {
			defer func() { r = recover() }()
			ds := panicAt{indexDataset(12), 7}
			for range NewLoader(ds, 6, NewSequentialSampler(12), Workers(3), Prefetch(prefetch)).Batches() {
			}
			return nil
		}()
		if !strings.Contains(fmt.Sprint(got), "cannot read example 7") {
			t.Fatalf("Prefetch(%d): recovered %v; want the dataset's panic", prefetch, got)
		}
	}
}

func TestWorkersRejectsZero(t *testing.T) {
	defer func() {
		if r := fmt.Sprint(recover()); r != "data: Workers(0): want at least 1 goroutine" {
			t.Fatalf("Workers(0) panicked with %q", r)
		}
	}()
	Workers(0)
}
