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
func Create(pattern string, n int) (path string, mem []byte, err error) {
	return "", nil, fmt.Errorf("create %s: %w", pattern, errUnsupported)
}

// Open fails: shared memory is supported on Linux only.
func Open(path string, n int) ([]byte, error) {
	return nil, fmt.Errorf("open %s: %w", path, errUnsupported)
}

// Unmap does nothing: Create and Open never map anything here.
func Unmap(mem []byte) {}
