package data

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/tensor"
)

// indexDataset returns n examples of shape [2 3] whose values encode the
// index (i*10 + position) and whose label is i % 10.
func indexDataset(n int) *TensorDataset {
	x := make([]float32, n*6)
	y := make([]int, n)
	for i := range n {
		for p := range 6 {
			x[i*6+p] = float32(i*10 + p)
		}
		y[i] = i % 10
	}
	return NewTensorDataset(tensor.New(x, n, 2, 3), y)
}

func checkBatch(t *testing.T, b Batch) {
	t.Helper()
	n := len(b.Indices)
	if !slices.Equal(b.X.Shape(), []int{n, 2, 3}) || len(b.Y) != n {
		t.Fatalf("batch of %d indices has X %v and %d labels", n, b.X.Shape(), len(b.Y))
	}
	for j, i := range b.Indices {
		if b.Y[j] != i%10 {
			t.Fatalf("label %d for index %d", b.Y[j], i)
		}
		for p := range 6 {
			if got := b.X.Data()[j*6+p]; got != float32(i*10+p) {
				t.Fatalf("example %d of the batch (index %d) value %d is %v", j, i, p, got)
			}
		}
	}
}

func TestLoaderBatches(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, n := range []int{0, 1, 7, 64, 100} {
		for _, bs := range []int{1, 3, 64} {
			for _, drop := range []bool{false, true} {
				for _, prefetch := range []int{0, 1, 2, 5} {
					name := fmt.Sprintf("n=%d bs=%d drop=%v prefetch=%d", n, bs, drop, prefetch)
					l := NewLoader(indexDataset(n), bs, NewRandomSampler(n, 3), DropLast(drop), Prefetch(prefetch))
					want := NewRandomSampler(n, 3).AppendIndices(nil)
					if drop {
						want = want[:n/bs*bs]
					}
					var got []int
					batches := 0
					for b := range l.Batches() {
						checkBatch(t, b)
						if len(b.Indices) != bs && (drop || len(got)+len(b.Indices) != len(want)) {
							t.Fatalf("%s: short batch of %d in the middle", name, len(b.Indices))
						}
						got = append(got, b.Indices...)
						batches++
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%s: visited %v, want %v", name, got, want)
					}
					if batches != l.Len() {
						t.Fatalf("%s: %d batches, Len %d", name, batches, l.Len())
					}
				}
			}
		}
	}
}

// countingDataset counts Example calls, to see how far the prefetcher ran.
type countingDataset struct {
	*TensorDataset
	calls atomic.Int64
}

func (d *countingDataset) Example(i int, x []float32) int {
	d.calls.Add(1)
	return d.TensorDataset.Example(i, x)
}

// prefetcherWaits reports whether the loader's producer goroutine is
// blocked in a select (for a free buffer) or has exited.
func prefetcherWaits() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "data.(*Loader).runPrefetch.func") {
			head, _, _ := strings.Cut(g, "\n")
			return strings.Contains(head, "[select")
		}
	}
	return true
}

// TestLoaderBatchValidDuringBody lets the prefetcher fill every buffer it
// can while the loop body holds a batch, then checks the batch is intact.
func TestLoaderBatchValidDuringBody(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n, bs, prefetch = 40, 4, 3
	ds := &countingDataset{TensorDataset: indexDataset(n)}
	l := NewLoader(ds, bs, NewRandomSampler(n, 1), Prefetch(prefetch))
	k := 0
	for b := range l.Batches() {
		// The producer may fill batches up to k+prefetch before it blocks
		// for a free buffer.
		want := int64(min(k+1+prefetch, n/bs) * bs)
		if !testproc.Poll(5*time.Second, func() bool { return ds.calls.Load() >= want && prefetcherWaits() }) {
			t.Fatalf("batch %d: prefetcher stalled at %d examples, want %d", k, ds.calls.Load(), want)
		}
		if got := ds.calls.Load(); got > want {
			t.Fatalf("batch %d: prefetcher assembled %d examples, more than %d buffers allow", k, got, want)
		}
		checkBatch(t, b)
		k++
	}
}

func TestLoaderBreakStopsWorker(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewSequentialSampler(1000)
	l := NewLoader(indexDataset(1000), 10, s, Prefetch(4))
	for range 3 { // reuse the loader after each break
		k := 0
		for b := range l.Batches() {
			checkBatch(t, b)
			if k++; k == 5 {
				break
			}
		}
		if st := s.State(); st.Seen != 50 {
			t.Fatalf("Seen %d after 5 batches of 10, want 50 (prefetched batches must not count)", st.Seen)
		}
	}
}

func TestLoaderPanicInBodyStopsWorker(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := NewLoader(indexDataset(100), 10, NewSequentialSampler(100), Prefetch(2))
	func() {
		defer func() {
			if r := recover(); r != "body" {
				t.Fatalf("recovered %v", r)
			}
		}()
		for range l.Batches() {
			panic("body")
		}
	}()
	if got := len(slices.Collect(l.Batches())); got != 10 {
		t.Fatalf("after a panic the loader gave %d batches, want 10", got)
	}
}

type panickyDataset struct{ *TensorDataset }

func (d panickyDataset) Example(i int, x []float32) int {
	if i == 55 {
		panic("bad example 55")
	}
	return d.TensorDataset.Example(i, x)
}

func TestLoaderWorkerPanicReraised(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, prefetch := range []int{0, 2} {
		l := NewLoader(panickyDataset{indexDataset(100)}, 10, NewSequentialSampler(100), Prefetch(prefetch))
		got := 0
		func() {
			defer func() {
				r := fmt.Sprint(recover())
				if !strings.Contains(r, "bad example 55") {
					t.Fatalf("prefetch %d: recovered %q", prefetch, r)
				}
			}()
			for range l.Batches() {
				got++
			}
		}()
		if got != 5 {
			t.Fatalf("prefetch %d: %d batches before the panic, want 5", prefetch, got)
		}
	}
}

func TestLoaderConcurrentRangePanics(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := NewLoader(indexDataset(10), 2, NewSequentialSampler(10))
	for range l.Batches() {
		func() {
			defer func() {
				if r := fmt.Sprint(recover()); !strings.Contains(r, "two loops") {
					t.Fatalf("recovered %q", r)
				}
			}()
			for range l.Batches() {
			}
		}()
		break
	}
}

func TestNewLoaderPanicsOnBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"batch size":  func() { NewLoader(indexDataset(1), 0, NewSequentialSampler(1)) },
		"nil sampler": func() { NewLoader(indexDataset(1), 1, nil) },
		"prefetch":    func() { Prefetch(-1) },
		"tensor":      func() { NewTensorDataset(tensor.New(make([]float32, 6), 2, 3), []int{1}) },
	} {
		func() {
			defer func() {
				if r := fmt.Sprint(recover()); !strings.HasPrefix(r, "data: ") {
					t.Errorf("%s: recovered %q, want a data: panic", name, r)
				}
			}()
			f()
		}()
	}
}

func BenchmarkLoader(b *testing.B) {
	const n = 4096
	x := make([]float32, n*784)
	ds := NewTensorDataset(tensor.New(x, n, 1, 28, 28), make([]int, n))
	for _, prefetch := range []int{0, 2} {
		b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) {
			l := NewLoader(ds, 64, NewRandomSampler(n, 0), Prefetch(prefetch))
			b.SetBytes(n * 784 * 4)
			for b.Loop() {
				for range l.Batches() {
				}
			}
		})
	}
}
