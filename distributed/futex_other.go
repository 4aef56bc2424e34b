//go:build !linux

package distributed

import "time"

// futexSleep naps: without futexes a waiter polls.
func futexSleep(addr *uint64, val uint32, d time.Duration) { time.Sleep(min(d, 50*time.Microsecond)) }

func futexWakeAll(addr *uint64) {}
