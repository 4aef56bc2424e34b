package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
)

// Backend is where the rendezvous state of one job lives, outside any
// worker: a TCP store (NewStoreBackend, torchrun's c10d backend), etcd
// (package etcd), or memory (NewMemBackend, for tests). Its methods may
// block on the network; ctx bounds them. It is safe for concurrent use.
type Backend interface {
	// Load returns the stored state (nil if none yet) and a version
	// token for Swap.
	Load(ctx context.Context) (state []byte, version string, err error)
	// Swap stores state if the stored version is still version; ok is
	// false, and nothing stored, if another node changed it first.
	Swap(ctx context.Context, version string, state []byte) (ok bool, err error)
	// Beat renews node's liveness; the Rendezvous calls it every
	// heartbeat interval. A node that stops beating for deadAfter is dead.
	Beat(ctx context.Context, node string) error
	// Alive reports which of nodes still beat.
	Alive(ctx context.Context, nodes []string) (map[string]bool, error)
	// Close releases the backend's connections; it stops a store this
	// node serves only once the other nodes are gone (or a bound passes).
	Close() error
}

// ErrBackendClosed is returned by a closed MemBackend.
var ErrBackendClosed = errors.New("rendezvous: backend closed")

// MemBackend is a Backend in memory, shared by the Rendezvous of one
// process: for tests, where Kill makes a node dead at once.
type MemBackend struct {
	mu     sync.Mutex // guards the fields below
	state  []byte
	ver    int
	dead   map[string]bool
	closed bool
}

// NewMemBackend returns an empty MemBackend.
func NewMemBackend() *MemBackend { return &MemBackend{dead: map[string]bool{}} }

// Load implements Backend.
func (m *MemBackend) Load(context.Context) ([]byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, "", ErrBackendClosed
	}
	return bytes.Clone(m.state), strconv.Itoa(m.ver), nil
}

// Swap implements Backend.
func (m *MemBackend) Swap(_ context.Context, version string, state []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, ErrBackendClosed
	}
	if version != strconv.Itoa(m.ver) {
		return false, nil
	}
	m.state, m.ver = bytes.Clone(state), m.ver+1
	return true, nil
}

// Beat implements Backend: a killed node's beats are ignored.
func (m *MemBackend) Beat(context.Context, string) error { return nil }

// Alive implements Backend: every node not killed is alive.
func (m *MemBackend) Alive(_ context.Context, nodes []string) (map[string]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		out[n] = !m.dead[n]
	}
	return out, nil
}

// Kill makes node dead, as if its heartbeats had lapsed.
func (m *MemBackend) Kill(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead[node] = true
}

// State returns the stored state, for tests to inspect.
func (m *MemBackend) State() (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return decode(m.state)
}

// Close implements Backend; it does nothing, as the nodes of a test share
// one MemBackend (see Shutdown).
func (m *MemBackend) Close() error { return nil }

// Shutdown makes every later call fail, as a lost store would.
func (m *MemBackend) Shutdown() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
}
