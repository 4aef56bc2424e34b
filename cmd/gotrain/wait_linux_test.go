//go:build linux

package main

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitDir waits up to limit until cond holds, checking it at first and
// whenever an entry of dir is created, finished being written, renamed
// or removed; it fails t if dir cannot be watched.
func waitDir(t testing.TB, dir string, limit time.Duration, cond func() bool) bool {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	defer unix.Close(fd)
	const events = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE
	if _, err := unix.InotifyAddWatch(fd, dir, events); err != nil {
		t.Fatalf("inotify: watch %s: %v", dir, err)
	}
	deadline := time.Now().Add(limit)
	buf := make([]byte, 64<<10)
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatalf("poll inotify: %v", err)
		}
		for { // drain: cond looks at the directory itself
			if _, err := unix.Read(fd, buf); err != nil {
				break
			}
		}
	}
}

// exits watches processes for their exit through pidfds, opened at once:
// a pid reused after the exit cannot stand in for the process.
type exits struct {
	pids []int
	fds  []int
}

// watchExits starts watching pids; a pid already gone counts as exited.
// The pidfds are closed when t ends.
func watchExits(t testing.TB, pids ...int) *exits {
	t.Helper()
	w := &exits{}
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			t.Fatalf("pidfd_open %d: %v", pid, err)
		}
		w.pids, w.fds = append(w.pids, pid), append(w.fds, fd)
	}
	t.Cleanup(w.close)
	return w
}

// close releases the pidfds.
func (w *exits) close() {
	for _, fd := range w.fds {
		unix.Close(fd)
	}
	w.pids, w.fds = nil, nil
}

// wait waits up to limit (0: looks once) for every watched process to
// exit, and returns the pids of those still running. A zombie has exited.
func (w *exits) wait(limit time.Duration) (running []int) {
	deadline := time.Now().Add(limit)
	pending := make([]int, len(w.fds)) // indexes into pids and fds
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		fds := make([]unix.PollFd, len(pending))
		for k, i := range pending {
			fds[k] = unix.PollFd{Fd: int32(w.fds[i]), Events: unix.POLLIN}
		}
		ms := max(0, int(time.Until(deadline).Milliseconds())+1)
		if limit == 0 {
			ms = 0
		}
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		still := pending[:0]
		for k, i := range pending {
			if err != nil || fds[k].Revents&unix.POLLIN == 0 {
				still = append(still, i)
			}
		}
		pending = still
		if err != nil || n == 0 || !time.Now().Before(deadline) {
			break
		}
	}
	for _, i := range pending {
		running = append(running, w.pids[i])
	}
	return running
}
