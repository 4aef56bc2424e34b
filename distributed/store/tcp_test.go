package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
)

var testToken = []byte("test token")

func startServer(t *testing.T) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// connCount is the number of connections s serves, in their handshake
// or after it.
func (s *Server) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func dial(t *testing.T, s *Server) *Client {
	t.Helper()
	c, err := Dial(ctxFor(t, 5*time.Second), s.Addr().String(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTCPConformance(t *testing.T) {
	testConformance(t, func(t *testing.T) (Store, Store) {
		s := startServer(t)
		return dial(t, s), dial(t, s)
	})
}

func TestTCPPrefixConformance(t *testing.T) {
	testConformance(t, func(t *testing.T) (Store, Store) {
		s := startServer(t)
		return Prefix(dial(t, s), "g1"), Prefix(dial(t, s), "g1")
	})
}

func TestTCPWrongToken(t *testing.T) {
	logs := testlog.Capture(t)
	s := startServer(t)
	start := time.Now()
	_, err := Dial(ctxFor(t, 5*time.Second), s.Addr().String(), []byte("not the token"))
	if !errors.Is(err, auth.ErrAuth) || !strings.Contains(err.Error(), s.Addr().String()) {
		t.Fatalf("Dial with a wrong token: %v; want auth.ErrAuth naming the address", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a refused token was retried for %v", d)
	}
	// The server logs the refusal, naming the peer, on its own goroutine.
	testproc.Poll(5*time.Second, func() bool { return strings.Contains(logs.String(), "wrong or missing token") })
	if l := logs.String(); !strings.Contains(l, "wrong or missing token") || !strings.Contains(l, "remote=127.0.0.1:") {
		t.Fatalf("server log %q does not report the refused peer", l)
	}
	if _, err := Dial(ctxFor(t, 5*time.Second), s.Addr().String(), nil); !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("Dial with no token: %v; want auth.ErrAuth", err)
	}
}

func TestTCPUnreachable(t *testing.T) {
	addr := testnet.FreeAddr(t)
	start := time.Now()
	_, err := Dial(ctxFor(t, 300*time.Millisecond), addr, testToken)
	d := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), addr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial(unreachable) = %v; want a deadline error naming %s", err, addr)
	}
	if d < 250*time.Millisecond || d > 2*time.Second {
		t.Fatalf("Dial(unreachable) gave up after %v; want about the 300ms deadline", d)
	}
}

// Workers start before rank 0's server: Dial keeps retrying until it is up.
func TestTCPDialBeforeListen(t *testing.T) {
	addr := testnet.FreeAddr(t)
	type result struct {
		c   *Client
		err error
	}
	done := make(chan result, 1)
	refused := make(chan struct{}) // Dial's first attempt failed
	var once sync.Once
	dialTCP = func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			once.Do(func() { close(refused) })
		}
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		c, err := Dial(ctx, addr, testToken)
		done <- result{c, err}
	}()
	// Dial is done with dialTCP once it has returned.
	defer func() { dialTCP = dialTCPDefault }()
	select {
	case <-refused:
	case r := <-done:
		t.Fatalf("Dial returned %v before anything listened on %s", r.err, addr)
	}
	s, err := Listen(addr, testToken)
	if err != nil {
		cancel()
		<-done
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	defer s.Close()
	r := <-done
	if r.err != nil {
		t.Fatalf("Dial: %v", r.err)
	}
	defer r.c.Close()
	if err := r.c.Set(ctxFor(t, time.Second), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

func TestTCPServerGone(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	const blocked = 5
	errs := make(chan error, blocked)
	for range blocked {
		ctx, waiting := waitingFor(t, 30*time.Second)
		go func() {
			_, err := c.Get(ctx, "never")
			errs <- err
		}()
		<-waiting
	}
	start := time.Now()
	s.Close()
	for range blocked {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrConnLost) || !strings.Contains(err.Error(), s.Addr().String()) {
				t.Fatalf("pending Get after server Close = %v; want ErrConnLost naming the server", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("pending Get did not fail after the server closed")
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("pending calls failed %v after the server closed", d)
	}
	if err := c.Set(ctxFor(t, time.Second), "k", nil); !errors.Is(err, ErrConnLost) {
		t.Fatalf("Set after server Close = %v; want ErrConnLost", err)
	}
}

// A Get abandoned by its caller is cancelled on the server too, so abandoned
// waits do not pile up there.
func TestTCPCancelledGetReleasedOnServer(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	for range 20 {
		if _, err := c.Get(ctxFor(t, 5*time.Millisecond), "never"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get = %v", err)
		}
	}
	// The server cancels them when the cancel frames arrive.
	waiters := func() int {
		s.data.mu.Lock()
		defer s.data.mu.Unlock()
		return len(s.data.waiters)
	}
	if !testproc.Poll(5*time.Second, func() bool { return waiters() == 0 }) {
		t.Fatalf("%d keys still have waiters on the server", waiters())
	}
}

// rawConn opens an authenticated connection to s for sending handmade
// frames.
func rawConn(t *testing.T, s *Server) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := auth.Client(ctxFor(t, 5*time.Second), conn, testToken, auth.Hello{Role: auth.RoleStore}); err != nil {
		t.Fatal(err)
	}
	return conn
}

func TestTCPMalformedFrames(t *testing.T) {
	for name, frame := range map[string][]byte{
		"huge length":  {0xff, 0xff, 0xff, 0xff},
		"short length": {0, 0, 0, 2, 1, 2},
		"unknown op":   newFrame(1, 99, 0).finish(),
		"truncated set": func() []byte {
			f := newFrame(1, opSet, 0).str("key").finish()
			binary.BigEndian.PutUint32(f[4+9:], 1<<30) // key length past the frame
			return f
		}(),
		"wait count": func() []byte {
			e := newFrame(1, opWait, 0)
			e.b = binary.BigEndian.AppendUint32(e.b, 1<<31)
			return e.finish()
		}(),
		"duplicate id": func() []byte {
			get := newFrame(7, opGet, 0).str("never").finish()
			return append(bytes.Clone(get), get...)
		}(),
		"oversized value": func() []byte {
			e := newFrame(1, opSet, 0).str("k")
			e.b = binary.BigEndian.AppendUint32(e.b, MaxValueSize+1)
			return e.finish()
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			logs := testlog.Capture(t)
			s := startServer(t)
			conn := rawConn(t, s)
			if _, err := conn.Write(frame); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := bufio.NewReader(conn).ReadByte(); err == nil {
				t.Fatal("server answered a malformed frame instead of closing the connection")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("server kept the connection open after a malformed frame")
			}
			testproc.Poll(5*time.Second, func() bool { return strings.Contains(logs.String(), "closing connection") })
			if !strings.Contains(logs.String(), "malformed frame") {
				t.Errorf("server log %q does not report the malformed frame", logs.String())
			}
			// Other clients are unaffected.
			c := dial(t, s)
			if err := c.Set(ctxFor(t, time.Second), "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTCPShutdownWaitsForClients(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctxFor(t, 5*time.Second)) }()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a client connected", err)
	case <-time.After(50 * time.Millisecond):
	}
	// The connected client keeps working during Shutdown.
	if err := c.Set(ctxFor(t, time.Second), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestTCPShutdownDeadline(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	err := s.Shutdown(ctxFor(t, 50*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v; want a deadline error", err)
	}
	if _, err := c.Get(ctxFor(t, 2*time.Second), "k"); !errors.Is(err, ErrConnLost) {
		t.Fatalf("Get after a forced shutdown = %v; want ErrConnLost", err)
	}
}

func TestTCPServeListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, nil) // empty token on both sides is allowed
	defer s.Close()
	c, err := Dial(ctxFor(t, 5*time.Second), ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, err := c.Add(ctxFor(t, time.Second), "n", 2); err != nil || n != 2 {
		t.Fatalf("Add = %d, %v", n, err)
	}
}

func TestTCPListenError(t *testing.T) {
	s := startServer(t)
	_, err := Listen(s.Addr().String(), nil)
	if err == nil || !strings.Contains(err.Error(), s.Addr().String()) {
		t.Fatalf("Listen on a port in use = %v; want an error naming it", err)
	}
}

// A connection that never completes the handshake is dropped when the
// server closes, without leaking its goroutine (goleak checks in TestMain).
func TestTCPSilentPeer(t *testing.T) {
	s := startServer(t)
	conn, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The server has accepted it and waits for its hello.
	if !testproc.Poll(5*time.Second, func() bool { return s.connCount() == 1 }) {
		t.Fatal("the server did not take the connection")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

// A client refused for its token before OnRefused is first called (a
// misconfigured rank quicker than rank 0's own set-up) is reported to the
// function once it is set; after OnRefused(nil), refusals are dropped.
func TestOnRefusedReplaysEarlyRefusals(t *testing.T) {
	s := startServer(t)
	if _, err := Dial(ctxFor(t, 5*time.Second), s.Addr().String(), []byte("wrong")); !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("Dial with a wrong token: %v", err)
	}
	// The server refuses on the connection's goroutine, which is done
	// when it no longer counts the connection.
	got := make(chan error, 4)
	if !testproc.Poll(5*time.Second, func() bool { return s.connCount() == 0 }) {
		t.Fatal("the server still serves the refused connection")
	}
	s.rmu.Lock()
	if n := len(s.early); n != 1 {
		s.rmu.Unlock()
		t.Fatalf("%d early refusals kept, want 1", n)
	}
	s.rmu.Unlock()
	s.OnRefused(func(_ net.Addr, err error) { got <- err })
	select {
	case err := <-got:
		if !errors.Is(err, auth.ErrAuth) {
			t.Fatalf("replayed refusal %v, want auth.ErrAuth", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the early refusal was not replayed")
	}
	s.OnRefused(nil)
	if _, err := Dial(ctxFor(t, 5*time.Second), s.Addr().String(), []byte("wrong")); !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("Dial with a wrong token: %v", err)
	}
	if !testproc.Poll(5*time.Second, func() bool { return s.connCount() == 0 }) {
		t.Fatal("the server still serves the refused connection")
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if len(s.early) != 0 || len(got) != 0 {
		t.Fatalf("after OnRefused(nil): %d kept, %d reported", len(s.early), len(got))
	}
}
