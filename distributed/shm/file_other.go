//go:build !linux

package shm

import (
	"errors"
	"fmt"
)

// supported: elsewhere shared memory is off and every message goes over
// TCP. (macOS has no /dev/shm, and without fallocate a full file system
// would surface as SIGBUS instead of an error.)
const supported = false

var errUnsupported = errors.New("shared memory is supported on Linux only")

// Create fails: shared memory is supported on Linux only.
func Create(kind string, n int) (path string, mem []byte, err error) {
	return "", nil, fmt.Errorf("create a %s file: %w", kind, errUnsupported)
}

// Open fails: shared memory is supported on Linux only.
func Open(path string, n int) ([]byte, error) {
	return nil, fmt.Errorf("open %s: %w", path, errUnsupported)
}

// Unmap does nothing: Create and Open never map anything here.
func Unmap(mem []byte) {}

// Free fails: shared memory is supported on Linux only.
func Free() (int64, error) { return 0, errUnsupported }

// RemoveStale does nothing: no gotrain process makes files here.
func RemoveStale(runID string) (files int, bytes int64, err error) { return 0, 0, nil }

// pidNS is unknown here.
func pidNS() uint64 { return 0 }
