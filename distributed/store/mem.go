package store

import (
	"bytes"
	"context"
	"sync"
)

// Mem is an in-process Store, for tests and for a single process. The zero
// value is not usable; call NewMem.
type Mem struct {
	mu      sync.Mutex // guards data, waiters, closed
	data    map[string][]byte
	waiters map[string]*waiter
	closed  bool
	done    chan struct{} // closed by Close, wakes every waiter
}

// waiter is the wake-up channel shared by every Get blocked on one key;
// Set closes it. n counts the blocked calls so the last one to give up can
// drop it.
type waiter struct {
	ch chan struct{}
	n  int
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty in-memory store.
func NewMem() *Mem {
	return &Mem{
		data:    make(map[string][]byte),
		waiters: make(map[string]*waiter),
		done:    make(chan struct{}),
	}
}

// setLocked stores v (owned by the store from now on) and wakes key's
// waiters.
func (m *Mem) setLocked(key string, v []byte) {
	m.data[key] = v
	if w, ok := m.waiters[key]; ok {
		close(w.ch)
		delete(m.waiters, key)
	}
}

// Set implements Store.
func (m *Mem) Set(ctx context.Context, key string, value []byte) error {
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	return m.setOwned(key, v)
}

// setOwned is Set of a value the store may keep without a copy.
func (m *Mem) setOwned(key string, v []byte) error {
	if err := checkKey("set", key); err != nil {
		return err
	}
	if err := checkValue("set", key, v); err != nil {
		return err
	}
	if v == nil {
		v = []byte{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.setLocked(key, v)
	return nil
}

// Get implements Store. The error of a Get that ends with ctx names the key
// and wraps ctx's error (context.DeadlineExceeded or its cause).
func (m *Mem) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := m.getShared(ctx, key)
	return bytes.Clone(v), err
}

// getShared is Get returning the stored slice itself, which the caller must
// not modify. (Stored slices are replaced, never written to.)
func (m *Mem) getShared(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		if v, ok := m.data[key]; ok {
			m.mu.Unlock()
			return v, nil
		}
		w := m.waiters[key]
		if w == nil {
			w = &waiter{ch: make(chan struct{})}
			m.waiters[key] = w
		}
		w.n++
		m.mu.Unlock()

		select {
		case <-w.ch: // set (Set already dropped w); look again
		case <-m.done:
			return nil, ErrClosed
		case <-ctx.Done():
			m.mu.Lock()
			if w.n--; w.n == 0 && m.waiters[key] == w {
				delete(m.waiters, key)
			}
			m.mu.Unlock()
			return nil, waitErr(ctx, "get", key)
		}
	}
}

// Add implements Store.
func (m *Mem) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey("add", key); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	old, ok := m.data[key]
	n, v, err := addInt(key, old, ok, delta)
	if err != nil {
		return 0, err
	}
	m.setLocked(key, v)
	return n, nil
}

// CompareAndSet implements Store. For an absent key and a non-empty
// expected value nothing is set and nil is returned (PyTorch returns
// expected here, which its own source calls a lie).
func (m *Mem) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := checkKey("compare-and-set", key); err != nil {
		return nil, err
	}
	if err := checkValue("compare-and-set", key, desired); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	old, ok := m.data[key]
	if (!ok && len(expected) == 0) || (ok && bytes.Equal(old, expected)) {
		v := bytes.Clone(desired)
		if v == nil {
			v = []byte{}
		}
		m.setLocked(key, v)
		return bytes.Clone(v), nil
	}
	return bytes.Clone(old), nil
}

// Wait implements Store; it waits for the keys in order, so the error of a
// Wait that ends with ctx names the first key still missing.
func (m *Mem) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if _, err := m.Get(ctx, k); err != nil {
			if ctx.Err() != nil && err != ErrClosed {
				return waitErr(ctx, "wait for", k)
			}
			return err
		}
	}
	return nil
}

// Delete implements Store.
func (m *Mem) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey("delete", key); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, ErrClosed
	}
	_, ok := m.data[key]
	delete(m.data, key)
	return ok, nil
}

// NumKeys implements Store.
func (m *Mem) NumKeys(ctx context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	return int64(len(m.data)), nil
}

// Close implements Store: blocked calls and later ones return ErrClosed.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.done)
	}
	return nil
}
