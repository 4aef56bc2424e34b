//go:build !linux

package shmfile

import "os"

// reserve is a no-op where fallocate is not available.
func reserve(f *os.File, n int64) error { return nil }
