//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package store

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

var errWouldBlock = errors.New("store: file lock held by another process")

func tryLockFile(f *os.File, exclusive bool) error {
	return fmt.Errorf("file store needs flock(2), which %s lacks", runtime.GOOS)
}

func unlockFile(f *os.File) error { return nil }
