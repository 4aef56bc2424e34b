// Package testlog holds what tests need to capture logs and process
// output: a buffer safe for concurrent writers, and a way to point slog's
// default logger at one for the length of a test.
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer that several goroutines may write while another
// reads it (a logger, a child process's stdout and stderr).
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Capture sends slog's default logger to a new Buffer until t ends, and
// returns the buffer.
func Capture(t testing.TB) *Buffer {
	t.Helper()
	buf := &Buffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}
