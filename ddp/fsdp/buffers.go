package fsdp

import "sync"

// buffers keeps the float32 buffers that gathers and gradient reductions
// are done with, by length, for the next unit of that size. Without it
// every step leaves several units' worth of garbage, and Go's heap grows
// to about twice its live size before a collection frees it: more than
// the sharding saves.
type buffers struct {
	mu   sync.Mutex
	free map[int][][]float32
}

// get returns a zeroed buffer of n values.
func (b *buffers) get(n int) []float32 {
	s, reused := b.take(n)
	if reused {
		clear(s)
	}
	return s
}

// take returns a buffer of n values with unspecified contents, and
// whether it was used before (a fresh one is zeroed).
func (b *buffers) take(n int) (s []float32, reused bool) {
	b.mu.Lock()
	l := b.free[n]
	if len(l) == 0 {
		b.mu.Unlock()
		return make([]float32, n), false
	}
	s = l[len(l)-1]
	b.free[n] = l[:len(l)-1]
	b.mu.Unlock()
	return s, true
}

// put gives s back; nothing may use it afterwards.
func (b *buffers) put(s []float32) {
	if len(s) == 0 {
		return
	}
	b.mu.Lock()
	if b.free == nil {
		b.free = map[int][][]float32{}
	}
	b.free[len(s)] = append(b.free[len(s)], s)
	b.mu.Unlock()
}

// drop lets the collector have every kept buffer: for work that needs
// memory of other sizes (consolidating the model); the next step's
// collectives allocate them again.
func (b *buffers) drop() {
	b.mu.Lock()
	b.free = nil
	b.mu.Unlock()
}
