package auth

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
)

// A flood of one warning gives its first occurrence at once and then one
// summary per interval with the count held back; a quiet interval ends it.
func TestLimiterSummarizes(t *testing.T) {
	var buf testlog.Buffer
	const interval = 300 * time.Millisecond
	l := NewLimiter(slog.New(slog.NewTextHandler(&buf, nil)), interval)
	defer l.Stop()
	for i := range 100 {
		l.Warn("flood", "i", i)
	}
	l.Warn("other", "i", 0)
	if got := strings.Count(buf.String(), "\n"); got != 2 {
		t.Fatalf("%d lines at once; want the first of each message:\n%s", got, buf.String())
	}
	time.Sleep(interval + interval/2)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "flood (repeated") || !strings.Contains(lines[2], "repeated=99") || !strings.Contains(lines[2], "i=99") {
		t.Fatalf("after one interval:\n%s\nwant a third line summarizing 99 floods, the last i=99", buf.String())
	}
	time.Sleep(2 * interval) // a quiet interval: nothing more to say
	if n := len(strings.Split(strings.TrimSpace(buf.String()), "\n")); n != 3 {
		t.Fatalf("%d lines after a quiet interval; want 3:\n%s", n, buf.String())
	}
	l.Warn("flood", "i", 100) // a new interval starts with a full line
	if !strings.HasSuffix(strings.TrimSpace(buf.String()), `msg=flood i=100`) {
		t.Fatalf("a flood after a quiet interval is not logged at once:\n%s", buf.String())
	}
}

// Stop writes what it held back.
func TestLimiterStopFlushes(t *testing.T) {
	var buf testlog.Buffer
	l := NewLimiter(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	l.Warn("m")
	l.Warn("m")
	l.Warn("m")
	l.Stop()
	if s := buf.String(); strings.Count(s, "\n") != 2 || !strings.Contains(s, "repeated=2") {
		t.Fatalf("after Stop:\n%s\nwant the first line and a summary of 2", s)
	}
}

// A Gate admits up to its bound, closes the connections past it, and
// admits again once a handshake is done.
func TestGateBound(t *testing.T) {
	var buf testlog.Buffer
	l := NewLimiter(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	defer l.Stop()
	g := NewGate("test", 2, l)
	pipe := func() (net.Conn, net.Conn) {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	for range 2 {
		server, _ := pipe()
		if !g.Admit(server) {
			t.Fatal("refused a connection under the bound")
		}
	}
	server, client := pipe()
	if g.Admit(server) {
		t.Fatal("admitted a connection past the bound")
	}
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatal("the refused connection is still open")
	}
	if s := buf.String(); !strings.Contains(s, "test: closed a new connection") || !strings.Contains(s, "limit=2") {
		t.Fatalf("log %q does not report the refusal and the bound", s)
	}
	g.Done()
	if server, _ := pipe(); !g.Admit(server) {
		t.Fatal("refused a connection after a handshake ended")
	}
}

// The default bound leaves most descriptors to the job.
func TestMaxPendingHandshakes(t *testing.T) {
	n := MaxPendingHandshakes()
	if n < 4 || n > 64 || n > max(4, fdLimit()/8) {
		t.Fatalf("MaxPendingHandshakes() = %d with a limit of %d descriptors", n, fdLimit())
	}
}

// Enter waits for a free slot, and gives up when ctx ends.
func TestGateEnter(t *testing.T) {
	g := NewGate("test", 1, nil)
	if !g.Enter(context.Background()) {
		t.Fatal("Enter failed on a free gate")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if g.Enter(ctx) {
		t.Fatal("Enter passed a full gate")
	}
	entered := make(chan bool)
	go func() { entered <- g.Enter(context.Background()) }()
	g.Done()
	if !<-entered {
		t.Fatal("Enter did not pass once the slot was freed")
	}
	a, b := net.Pipe()
	defer b.Close()
	if g.Admit(a) { // full again, and no Limiter to warn: closed quietly
		t.Fatal("Admit passed a full gate")
	}
}
