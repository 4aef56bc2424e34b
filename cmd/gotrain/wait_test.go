package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The tests wait for what their processes do by the event itself where
// Linux reports one: a write to a process's output (output and bell), a
// change in a directory (waitDir, by inotify), a process's exit (exits, by
// pidfd; wait_linux_test.go). Only state that no event announces (an HTTP
// endpoint, another namespace's process list) is polled, by poll, and so
// are directories and exits where Linux's events are missing
// (wait_other_test.go), for the tests to build there.

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

// waitFile waits up to limit for path to exist; out is the output to
// show if it does not.
func waitFile(t *testing.T, path string, limit time.Duration, out interface{ String() string }) {
	t.Helper()
	exists := func() bool { _, err := os.Stat(path); return err == nil }
	if !waitDir(t, filepath.Dir(path), limit, exists) {
		t.Fatalf("%s did not appear within %v; output:\n%s", path, limit, out.String())
	}
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
