package auth

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
)

// fakeTimers is a Limiter's clock that the test advances: an interval
// ends when the test says so.
type fakeTimers struct {
	mu      sync.Mutex
	pending []*fakeTimer
}

type fakeTimer struct {
	f       func()
	stopped bool
}

func (ft *fakeTimers) afterFunc(_ time.Duration, f func()) stopper {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	tm := &fakeTimer{f: f}
	ft.pending = append(ft.pending, tm)
	return &fakeStop{ft, tm}
}

type fakeStop struct {
	ft *fakeTimers
	tm *fakeTimer
}

func (s *fakeStop) Stop() bool {
	s.ft.mu.Lock()
	defer s.ft.mu.Unlock()
	was := !s.tm.stopped
	s.tm.stopped = true
	return was
}

// endInterval runs the timers started so far, as their interval ends.
func (ft *fakeTimers) endInterval() {
	ft.mu.Lock()
	due := ft.pending
	ft.pending = nil
	ft.mu.Unlock()
	for _, tm := range due {
		ft.mu.Lock()
		stopped := tm.stopped
		ft.mu.Unlock()
		if !stopped {
			tm.f()
		}
	}
}

// A flood of one warning gives its first occurrence at once and then one
// summary per interval with the count held back; a quiet interval ends it.
func TestLimiterSummarizes(t *testing.T) {
	var buf testlog.Buffer
	const interval = 300 * time.Millisecond
	l := NewLimiter(slog.New(slog.NewTextHandler(&buf, nil)), interval)
	clock := &fakeTimers{}
	l.afterFunc = clock.afterFunc
	defer l.Stop()
	for i := range 100 {
		l.Warn("flood", "i", i)
	}
	l.Warn("other", "i", 0)
	if got := strings.Count(buf.String(), "\n"); got != 2 {
		t.Fatalf("%d lines at once; want the first of each message:\n%s", got, buf.String())
	}
	clock.endInterval()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "flood (repeated") || !strings.Contains(lines[2], "repeated=99") || !strings.Contains(lines[2], "i=99") {
		t.Fatalf("after one interval:\n%s\nwant a third line summarizing 99 floods, the last i=99", buf.String())
	}
	clock.endInterval() // a quiet interval: nothing more to say
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

// tcpPair returns the server end and the client end of a loopback TCP
// connection dialed from the address from ("127.0.0.2": another host, as
// far as the Gate can tell).
func tcpPair(t *testing.T, ln net.Listener, from string) (server, client net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	client, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// A Gate admits up to its bound, at most half of it from one host, closes
// the connections past it, and admits again once a handshake is done.
func TestGateBound(t *testing.T) {
	var buf testlog.Buffer
	l := NewLimiter(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	defer l.Stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g := NewGate("test", 4, l)
	var dones []func()
	admit := func(from string, want bool) {
		t.Helper()
		server, client := tcpPair(t, ln, from)
		done, ok := g.Admit(server)
		if ok != want {
			t.Fatalf("Admit from %s = %v; want %v", from, ok, want)
		}
		if ok {
			dones = append(dones, done)
			return
		}
		if _, err := client.Read(make([]byte, 1)); err == nil {
			t.Fatal("a refused connection is still open")
		}
	}
	admit("127.0.0.2", true)
	admit("127.0.0.2", true)
	admit("127.0.0.2", false) // half the slots from one host
	admit("127.0.0.1", true)
	admit("127.0.0.1", true)
	admit("127.0.0.3", false) // all the slots
	if s := buf.String(); !strings.Contains(s, "test: closed a new connection") || !strings.Contains(s, "limit=4") {
		t.Fatalf("log %q does not report the refusal and the bound", s)
	}
	dones[0]()
	admit("127.0.0.2", true)
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
	if _, ok := g.Admit(a); ok { // full again, and no Limiter to warn: closed quietly
		t.Fatal("Admit passed a full gate")
	}
}
