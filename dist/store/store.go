// Package store is the rendezvous key-value store of gotrain's process
// groups, with PyTorch's c10d Store semantics: a TCP store served by one
// process (rank 0, or `gotrain store`), a file store on a shared file
// system, an in-memory store for tests, and a prefix wrapper that
// namespaces keys.
package store

import (
	"context"
	"errors"
)

// Store is a key-value store shared by all ranks of a job. Every method may
// block on the network; ctx bounds it. Implementations are safe for
// concurrent use.
type Store interface {
	// Set stores value under key, replacing any previous value.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns key's value, waiting until it is set or ctx ends.
	Get(ctx context.Context, key string) ([]byte, error)
	// Add atomically adds delta to the integer stored under key (absent
	// counts as 0) and returns the new value.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// CompareAndSet sets key to desired if its current value equals
	// expected (an absent key matches an empty expected) and returns the
	// value now stored.
	CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error)
	// Wait blocks until every key is set or ctx ends.
	Wait(ctx context.Context, keys ...string) error
	// Delete removes key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
	// NumKeys returns the number of keys stored.
	NumKeys(ctx context.Context) (int64, error)
	// Close releases the store's connections. It does not stop a server.
	Close() error
}

// ErrClosed is returned by operations on a closed store.
var ErrClosed = errors.New("store: closed")
