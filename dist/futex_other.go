//go:build !linux

package dist

import (
	"os"
	"time"
)

// futexSleep naps: without futexes a waiter polls.
func futexSleep(addr *uint64, val uint32, d time.Duration) { time.Sleep(min(d, 50*time.Microsecond)) }

func futexWakeAll(addr *uint64) {}

// reserve is a no-op where fallocate is not available.
func reserve(f *os.File, n int64) error { return nil }
