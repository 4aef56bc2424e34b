package shmfile

import (
	"os"
	"syscall"
)

// reserve allocates f's first n bytes on its file system now, so that
// writing them later cannot fail.
func reserve(f *os.File, n int64) error {
	return syscall.Fallocate(int(f.Fd()), 0, 0, n)
}
