// Package store is the rendezvous key-value store of gotrain's process
// groups, with PyTorch's c10d Store semantics. Ranks use it to find each
// other: each publishes its address under a key and Gets the others',
// which blocks until they are set.
//
// Implementations:
//
//   - Server and Client (Listen, Serve, Dial): a TCP store served by one
//     process (rank 0, or `gotrain store`), like PyTorch's TCPStore. Every
//     connection starts with the dist/auth handshake over the job's token;
//     one connection multiplexes any number of concurrent calls; a lost
//     server fails every pending call at once with ErrConnLost.
//   - File (NewFile): an append-only log on a shared file system guarded by
//     flock(2), like PyTorch's FileStore; Get polls.
//   - Mem (NewMem): in-process, for tests and single-process jobs.
//   - Prefix: a namespacing view of another Store.
//
// All of them enforce the same limits (MaxKeySize, MaxValueSize), store
// Add's counters as decimal text, and report a Get or Wait that outlives
// its ctx with an error naming the key and wrapping ctx's error.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// Size limits, enforced by every implementation so that a program that
// works on one store works on all of them. The TCP store's frames are
// bounded accordingly (see MaxFrameSize).
const (
	// MaxKeySize is the longest key, in bytes, including any prefix.
	MaxKeySize = 4096
	// MaxValueSize is the largest value, in bytes: 64 MiB.
	MaxValueSize = 64 << 20
)

// ErrTooLarge is returned for a key longer than MaxKeySize or a value
// larger than MaxValueSize.
var ErrTooLarge = errors.New("store: key or value too large")

func checkKey(op, key string) error {
	if len(key) > MaxKeySize {
		return fmt.Errorf("%w: %s: key of %d bytes exceeds %d", ErrTooLarge, op, len(key), MaxKeySize)
	}
	return nil
}

func checkValue(op, key string, v []byte) error {
	if len(v) > MaxValueSize {
		return fmt.Errorf("%w: %s %q: value of %d bytes exceeds %d", ErrTooLarge, op, key, len(v), MaxValueSize)
	}
	return nil
}

// addInt implements Add's arithmetic on a stored value: absent counts as 0,
// and values are decimal integers as in PyTorch's stores.
func addInt(key string, old []byte, present bool, delta int64) (int64, []byte, error) {
	var cur int64
	if present {
		var err error
		cur, err = strconv.ParseInt(string(old), 10, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("store: add %q: stored value %.32q is not a decimal integer", key, old)
		}
	}
	n := cur + delta
	return n, strconv.AppendInt(nil, n, 10), nil
}

// waitErr is the error of a Get or Wait that ended with ctx, naming the key.
func waitErr(ctx context.Context, op, key string) error {
	return fmt.Errorf("store: %s %q: key not set before the context ended: %w", op, key, context.Cause(ctx))
}
