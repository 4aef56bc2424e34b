//go:build !linux

package main

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

// pollEvery is how often the portable waits look again.
const pollEvery = 10 * time.Millisecond

// waitDir waits up to limit until cond holds; without inotify it looks
// every pollEvery.
func waitDir(t testing.TB, dir string, limit time.Duration, cond func() bool) bool {
	return poll(limit, pollEvery, cond)
}

// exits watches processes for their exit; without pidfds it asks with
// signal 0 every pollEvery.
type exits struct{ pids []int }

// watchExits starts watching pids.
func watchExits(t testing.TB, pids ...int) *exits { return &exits{pids: pids} }

// close stops watching.
func (w *exits) close() { w.pids = nil }

// wait waits up to limit (0: looks once) for every watched process to
// exit, and returns the pids of those still running.
func (w *exits) wait(limit time.Duration) (running []int) {
	alive := func() []int {
		var r []int
		for _, pid := range w.pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				r = append(r, pid)
			}
		}
		return r
	}
	poll(limit, pollEvery, func() bool { running = alive(); return len(running) == 0 })
	return running
}
