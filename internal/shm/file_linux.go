package shm

import (
	"fmt"
	"os"
	"syscall"
)

// supported: Linux has a tmpfs /dev/shm, fallocate and futexes.
const supported = true

// Create makes a file of n bytes in /dev/shm, named from pattern as by
// os.CreateTemp, reserves and maps it. The caller removes the file (once
// its peers have mapped it) and unmaps mem.
func Create(pattern string, n int) (path string, mem []byte, err error) {
	f, err := os.CreateTemp("/dev/shm", pattern)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	err = f.Truncate(int64(n))
	if err == nil {
		err = syscall.Fallocate(int(f.Fd()), 0, 0, int64(n))
	}
	if err != nil {
		os.Remove(f.Name())
		return "", nil, fmt.Errorf("reserve %d MiB in /dev/shm: %w", n>>20, err)
	}
	mem, err = syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(f.Name())
		return "", nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	return f.Name(), mem, nil
}

// Open maps the file at path, which must hold exactly n bytes.
func Open(path string, n int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != int64(n) {
		return nil, fmt.Errorf("%s holds %d bytes, want %d", path, fi.Size(), n)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return mem, nil
}

// Unmap releases a mapping from Create or Open; nil is a no-op.
func Unmap(mem []byte) {
	if mem != nil {
		syscall.Munmap(mem)
	}
}
