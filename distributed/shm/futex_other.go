//go:build !linux

package shm

import "time"

// Without futexes a waiter naps and polls. (Shared memory is off outside
// Linux, see supported, so no arena reaches these; they keep the wait
// correct on any system.)

// futexSleep naps for at most d (and at most 50 µs); callers re-check
// their condition.
func futexSleep(addr *uint64, val uint32, d time.Duration) { time.Sleep(min(d, 50*time.Microsecond)) }

// futexWakeAll does nothing: nappers wake by themselves.
func futexWakeAll(addr *uint64) {}
