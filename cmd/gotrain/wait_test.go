package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests wait for what their processes do by the event itself where
// Linux reports one: a write to a process's output (output and bell), a
// change in a directory (waitDir, by inotify), a process's exit (exits, by
// pidfd). Only state that no event announces (an HTTP endpoint, another
// namespace's process list) is polled, by poll.

// bell wakes whoever waits on it at each ring; several outputs may share
// one, so that a test can wait on all of them at once.
type bell struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next ring
}

// ring wakes every current waiter.
func (b *bell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// next returns a channel closed at the next ring.
func (b *bell) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// waitFor waits until cond holds, checking it at first and after each
// ring, for up to limit, and reports whether it held.
func (b *bell) waitFor(limit time.Duration, cond func() bool) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		// Taken before cond is checked, so a ring in between is not lost.
		next := b.next()
		if cond() {
			return true
		}
		select {
		case <-next:
		case <-timer.C:
			return cond()
		}
	}
}

// output is a process's output, safe for concurrent writers, that rings
// its bell at each write.
type output struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	bell *bell
}

// newOutput returns an output that rings b, or a bell of its own if b is
// nil.
func newOutput(b *bell) *output {
	if b == nil {
		b = &bell{}
	}
	return &output{bell: b}
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	n, err := o.buf.Write(p)
	o.mu.Unlock()
	o.bell.ring()
	return n, err
}

// String returns everything written so far.
func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits up to limit until cond holds of the output so far, and
// reports whether it did.
func (o *output) waitFor(limit time.Duration, cond func(out string) bool) bool {
	return o.bell.waitFor(limit, func() bool { return cond(o.String()) })
}

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

// waitFile waits up to limit for path to exist; out is the output to
// show if it does not.
func waitFile(t *testing.T, path string, limit time.Duration, out interface{ String() string }) {
	t.Helper()
	exists := func() bool { _, err := os.Stat(path); return err == nil }
	if !waitDir(t, filepath.Dir(path), limit, exists) {
		t.Fatalf("%s did not appear within %v; output:\n%s", path, limit, out.String())
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

// poll checks cond every interval until it holds or limit has passed,
// and reports whether it held: for state that no event announces.
func poll(limit, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		<-tick.C
	}
}
