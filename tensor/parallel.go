package tensor

import (
	"sync"

	"github.com/gotrain/gotrain/internal/kernels"
)

// parallelFor splits [0, n) into contiguous chunks over up to
// kernels.NumThreads() goroutines and calls fn(worker, lo, hi) for each;
// worker numbers are dense from 0. Work of fewer than minItems items per
// goroutine runs on the caller alone, where spawning costs more than it
// saves. It returns the number of workers used.
func parallelFor(n, minItems int, fn func(worker, lo, hi int)) int {
	workers := min(kernels.NumThreads(), n/max(minItems, 1))
	if workers <= 1 {
		if n > 0 {
			fn(0, 0, n)
		}
		return 1
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, w*n/workers, (w+1)*n/workers)
		}()
	}
	fn(0, 0, n/workers)
	wg.Wait()
	return workers
}

// bufPools recycles large float32 scratch buffers (im2col columns, partial
// gradients) between ops and steps, one sync.Pool per length: a training
// loop asks for the same few sizes every step.
var bufPools sync.Map // int -> *sync.Pool of *[]float32

// getBuf returns a scratch slice of length n with unspecified contents.
func getBuf(n int) []float32 {
	if p, ok := bufPools.Load(n); ok {
		if b, ok := p.(*sync.Pool).Get().(*[]float32); ok {
			return *b
		}
	}
	return make([]float32, n)
}

// putBuf returns a slice obtained from getBuf for reuse.
func putBuf(b []float32) {
	p, ok := bufPools.Load(len(b))
	if !ok {
		p, _ = bufPools.LoadOrStore(len(b), new(sync.Pool))
	}
	p.(*sync.Pool).Put(&b)
}
