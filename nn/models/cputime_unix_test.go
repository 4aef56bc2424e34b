//go:build unix

package models

import (
	"syscall"
	"time"
)

// processCPUTime returns the user+system CPU time of this process so far,
// a measure of work that, unlike wall time, barely moves when other
// processes share the cores.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
