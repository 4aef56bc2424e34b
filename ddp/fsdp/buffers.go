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
	b.mu.Lock()
	l := b.free[n]
	if len(l) == 0 {
		b.mu.Unlock()
		return make([]float32, n)
	}
	s := l[len(l)-1]
	b.free[n] = l[:len(l)-1]
	b.mu.Unlock()
	clear(s)
	return s
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
