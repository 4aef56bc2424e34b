package tensor

import (
	"sync"
	"unsafe"

	"github.com/gotrain/gotrain/internal/kernels"
)

// parallelFor splits [0, n) into contiguous chunks over up to
// kernels.NumThreads() goroutines and calls fn(worker, lo, hi) for each;
// worker numbers are dense from 0. Work of fewer than minItems items per
// goroutine runs on the caller alone, where spawning costs more than it
// saves. It returns the number of workers used.
func parallelFor(n, minItems int, fn func(worker, lo, hi int)) int {
	workers := parallelWorkers(n, minItems)
	if workers <= 1 {
		if n > 0 {
			fn(0, 0, n)
		}
		return 1
	}
	kernels.Parallel(workers, func(w int) { fn(w, w*n/workers, (w+1)*n/workers) })
	return workers
}

// parallelWorkers is how many workers parallelFor(n, minItems, ...) runs
// (fn's worker argument is below it); 1 when it runs fn inline.
func parallelWorkers(n, minItems int) int {
	return max(min(kernels.NumThreads(), n/max(minItems, 1)), 1)
}

// workerBufs takes one pooled buffer of size floats for each of the
// workers parallelFor(n, minItems, ...) runs, before any of them starts,
// so that a pass holds as many buffers every time, however the workers
// happen to overlap; putBufs hands them back.
func workerBufs(n, minItems, size int) [][]float32 {
	bufs := make([][]float32, parallelWorkers(n, minItems))
	for i := range bufs {
		bufs[i] = getBuf(size)
	}
	return bufs
}

// putBufs hands back the buffers of workerBufs.
func putBufs(bufs [][]float32) {
	for _, b := range bufs {
		putBuf(b)
	}
}

// scratch recycles large float32 buffers (im2col columns, pass-local
// gradients, partial sums) between ops and training steps. A training loop
// asks for the same few sizes every step; unlike a sync.Pool, which the
// garbage collector empties every cycle or two, this free list keeps them,
// bounded by maxScratchBytes in total so an odd size cannot pin memory
// without limit. Fresh large allocations cost zeroing and page faults.
var scratch struct {
	mu    sync.Mutex // guards free, bytes and fresh
	free  map[int][][]float32
	bytes int
	fresh int64 // bytes of poolable buffers allocated because none was free
}

const (
	maxScratchBytes = 1 << 30 // a ResNet-18 step at batch 128 cycles about 700 MiB
	maxScratchPer   = 64      // buffers kept per size (a transformer step has dozens of one size)
	minScratchLen   = 1024    // smaller buffers are cheap to allocate
)

// getBuf returns a buffer of length n with unspecified contents.
func getBuf(n int) []float32 {
	if n >= minScratchLen {
		scratch.mu.Lock()
		if l := scratch.free[n]; len(l) > 0 {
			b := l[len(l)-1]
			scratch.free[n] = l[:len(l)-1]
			scratch.bytes -= 4 * n
			scratch.mu.Unlock()
			return b
		}
		scratch.fresh += 4 * int64(n)
		scratch.mu.Unlock()
	}
	return make([]float32, n)
}

// putBuf hands a buffer back for reuse; the caller must not touch it again.
func putBuf(b []float32) {
	n := len(b)
	if n < minScratchLen {
		return
	}
	scratch.mu.Lock()
	defer scratch.mu.Unlock()
	if scratch.bytes+4*n > maxScratchBytes || len(scratch.free[n]) >= maxScratchPer {
		return
	}
	if scratch.free == nil {
		scratch.free = make(map[int][][]float32)
	}
	scratch.free[n] = append(scratch.free[n], b[:n:n])
	scratch.bytes += 4 * n
}

// PoolStats reports the bytes the buffer pool holds for reuse and the
// cumulative bytes of poolable buffers it had to allocate because none of
// the size was free. A training loop in its steady state allocates no
// fresh bytes per step: comparing fresh across steps finds results taken
// from the pool and never handed back (see Recycle).
func PoolStats() (held, fresh int64) {
	scratch.mu.Lock()
	defer scratch.mu.Unlock()
	return int64(scratch.bytes), scratch.fresh
}

// ReleasePool empties the buffer pool, leaving its buffers to the garbage
// collector. A training loop calls it before work that needs buffers of
// other sizes (an evaluation pass on smaller chunks), so that the memory
// serves that work rather than sitting idle beside it; the next training
// step refills the pool.
func ReleasePool() {
	scratch.mu.Lock()
	defer scratch.mu.Unlock()
	clear(scratch.free)
	scratch.bytes = 0
}

// getIdx is getBuf for int32 indices (pooling argmax), sharing its free
// lists: the buffers hold no pointers either way.
func getIdx(n int) []int32 {
	b := getBuf(n)
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), n)
}

// putIdx hands a buffer from getIdx back for reuse.
func putIdx(b []int32) {
	if len(b) == 0 {
		return
	}
	putBuf(unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)))
}

// getBytes is getBuf for byte buffers (bit masks): a recycled float32
// buffer of ⌈n/4⌉ elements seen as n bytes.
func getBytes(n int) []byte {
	if n == 0 {
		return nil
	}
	b := getBuf((n + 3) / 4)
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b))[:n]
}

// putBytes hands a buffer from getBytes back for reuse.
func putBytes(b []byte) {
	if cap(b) < 4 {
		return
	}
	b = b[:cap(b)]
	putBuf(unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4))
}
