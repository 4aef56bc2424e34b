package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
)

type outcome struct {
	hello Hello
	err   error
}

// handshake runs Client and Server on the two ends of a net.Pipe.
func handshake(t *testing.T, ctok, stok []byte, ch, sh Hello, accept func(Hello) error) (client, server outcome) {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	return run(t, c, s, ctok, stok, ch, sh, accept)
}

func run(t *testing.T, c, s net.Conn, ctok, stok []byte, ch, sh Hello, accept func(Hello) error) (client, server outcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		server.hello, server.err = Server(ctx, s, stok, sh, accept)
		if server.err != nil {
			s.Close() // as a real server does; unblocks the client
		}
	}()
	client.hello, client.err = Client(ctx, c, ctok, ch)
	if client.err != nil {
		c.Close()
	}
	wg.Wait()
	return client, server
}

var (
	workerHello = Hello{Role: RoleData, JobID: "job-1", Rank: 3, WorldSize: 4}
	masterHello = Hello{Role: RoleData, JobID: "job-1", Rank: 0, WorldSize: 4}
)

func TestHandshakeOK(t *testing.T) {
	tok := []byte("secret")
	var seen Hello
	c, s := handshake(t, tok, tok, workerHello, masterHello, func(p Hello) error { seen = p; return nil })
	if c.err != nil || s.err != nil {
		t.Fatalf("client err %v, server err %v", c.err, s.err)
	}
	want := masterHello
	want.Version = ProtocolVersion
	if c.hello != want {
		t.Errorf("client got %+v, want %+v", c.hello, want)
	}
	want = workerHello
	want.Version = ProtocolVersion
	if s.hello != want || seen != want {
		t.Errorf("server got %+v (accept saw %+v), want %+v", s.hello, seen, want)
	}
}

func TestEmptyTokenBothSides(t *testing.T) {
	c, s := handshake(t, nil, []byte{}, workerHello, masterHello, nil)
	if c.err != nil || s.err != nil {
		t.Fatalf("client err %v, server err %v", c.err, s.err)
	}
}

func TestWrongToken(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ctok, stok []byte
	}{
		{"different", []byte("a"), []byte("b")},
		{"client missing", nil, []byte("b")},
		{"server missing", []byte("a"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := testlog.Capture(t)
			freshRefusals(t) // each case's refusal is the first of its interval
			c, s := handshake(t, tc.ctok, tc.stok, workerHello, masterHello, func(Hello) error {
				t.Error("accept called for an unauthenticated peer")
				return nil
			})
			if !errors.Is(c.err, ErrAuth) {
				t.Errorf("client err = %v, want ErrAuth", c.err)
			}
			if !errors.Is(s.err, ErrAuth) {
				t.Errorf("server err = %v, want ErrAuth", s.err)
			}
			if l := logs.String(); !strings.Contains(l, "wrong or missing token") || !strings.Contains(l, "remote=pipe") {
				t.Errorf("server log %q does not report the refusal with the remote address", l)
			}
		})
	}
}

func TestVersionMismatch(t *testing.T) {
	testlog.Capture(t)
	ch := workerHello
	ch.Version = ProtocolVersion + 1
	c, s := handshake(t, nil, nil, ch, masterHello, nil)
	for side, err := range map[string]error{"client": c.err, "server": s.err} {
		if !errors.Is(err, ErrVersion) {
			t.Errorf("%s err = %v, want ErrVersion", side, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, fmt.Sprint("version ", ProtocolVersion)) || !strings.Contains(msg, fmt.Sprint("version ", ProtocolVersion+1)) {
			t.Errorf("%s error %q does not name both versions", side, msg)
		}
	}
}

func TestRejectedBothSides(t *testing.T) {
	c, s := handshake(t, nil, nil, workerHello, masterHello, func(p Hello) error {
		return fmt.Errorf("rank %d already joined", p.Rank)
	})
	for side, err := range map[string]error{"client": c.err, "server": s.err} {
		if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "rank 3 already joined") {
			t.Errorf("%s err = %v, want ErrRejected naming the reason", side, err)
		}
	}
}

func TestRoleMismatch(t *testing.T) {
	ch := workerHello
	ch.Role = RoleStore
	c, s := handshake(t, nil, nil, ch, masterHello, nil)
	if !errors.Is(c.err, ErrRejected) || !errors.Is(s.err, ErrRejected) {
		t.Fatalf("client err %v, server err %v; want ErrRejected on both", c.err, s.err)
	}
}

func TestJobIDTooLong(t *testing.T) {
	h := workerHello
	h.JobID = strings.Repeat("x", MaxJobIDLen+1)
	c, _ := net.Pipe()
	defer c.Close()
	if _, err := Client(context.Background(), c, nil, h); err == nil {
		t.Fatal("Client accepted an oversized JobID")
	}
}

// A silent server must not block the client past ctx's deadline.
func TestClientDeadline(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go func() { // read the hello and then say nothing
		buf := make([]byte, MaxMessageSize)
		readMsg(s, buf)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Client(ctx, c, nil, workerHello)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Client returned after %v", d)
	}
}

func TestServerCancel(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Server(ctx, s, nil, masterHello, nil)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Server ignored cancellation")
	}
}

// Replaying a recorded client's messages on a new connection fails: the
// server's fresh nonce makes the old proof worthless.
func TestReplayRefused(t *testing.T) {
	testlog.Capture(t)
	tok := []byte("secret")
	// Record a successful client's messages.
	c, s := net.Pipe()
	rec := &recordingConn{Conn: c}
	cl, sv := run(t, rec, s, tok, tok, workerHello, masterHello, nil)
	c.Close()
	s.Close()
	if cl.err != nil || sv.err != nil {
		t.Fatalf("recording handshake failed: %v / %v", cl.err, sv.err)
	}
	// Replay them verbatim to a fresh server.
	c, s = net.Pipe()
	defer c.Close()
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		_, err := Server(context.Background(), s, tok, masterHello, nil)
		s.Close()
		done <- err
	}()
	go func() {
		c.Write(rec.written.Bytes())
	}()
	buf := make([]byte, 4096)
	for { // drain the server's answers until it hangs up
		if _, err := c.Read(buf); err != nil {
			break
		}
	}
	if err := <-done; !errors.Is(err, ErrAuth) {
		t.Fatalf("replayed handshake: server err = %v, want ErrAuth", err)
	}
}

type recordingConn struct {
	net.Conn
	written bytes.Buffer
}

func (r *recordingConn) Write(p []byte) (int, error) {
	r.written.Write(p)
	return r.Conn.Write(p)
}

// A peer that is not gotrain at all (an HTTP request) gets an error, not an
// allocation of the length it seems to announce.
func TestGarbagePeer(t *testing.T) {
	testlog.Capture(t)
	c, s := net.Pipe()
	defer c.Close()
	go func() {
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	}()
	_, err := Server(context.Background(), s, nil, masterHello, nil)
	s.Close()
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v, want ErrProtocol", err)
	}
}

func TestTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tok := []byte("tcp-secret")
	srvErr := make(chan error, 2)
	go func() {
		for range 2 {
			conn, err := ln.Accept()
			if err != nil {
				srvErr <- err
				return
			}
			_, err = Server(context.Background(), conn, tok, masterHello, nil)
			conn.Close()
			srvErr <- err
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Client(ctx, conn, tok, workerHello)
	conn.Close()
	if err != nil || got.Rank != 0 || got.JobID != "job-1" {
		t.Fatalf("Client = %+v, %v", got, err)
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}

	logs := testlog.Capture(t)
	freshRefusals(t)
	conn, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Client(ctx, conn, []byte("wrong"), workerHello)
	conn.Close()
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong token over TCP: client err = %v", err)
	}
	if err := <-srvErr; !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong token over TCP: server err = %v", err)
	}
	if !strings.Contains(logs.String(), "remote=127.0.0.1:") {
		t.Errorf("server log %q does not name the remote address", logs.String())
	}
}

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []Hello{
		{Version: 1, Role: RoleStore, JobID: "", Rank: -1, WorldSize: -1},
		{Version: 7, Role: RoleData, JobID: strings.Repeat("j", MaxJobIDLen), Rank: 1 << 30, WorldSize: 1<<31 - 1},
	} {
		b, err := encodeHello(h)
		if err != nil {
			t.Fatal(err)
		}
		d := &decoder{b: b}
		got, raw := decodeHello(d)
		if err := d.finish(); err != nil || got != h || !bytes.Equal(raw, b) {
			t.Errorf("round trip of %+v: got %+v, raw equal %v, err %v", h, got, bytes.Equal(raw, b), err)
		}
	}
}

func ExampleClient() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	token := []byte("shared job token")
	go func() {
		conn, _ := ln.Accept()
		defer conn.Close()
		hello := Hello{Role: RoleData, JobID: "demo", Rank: 0, WorldSize: 2}
		Server(context.Background(), conn, token, hello, func(peer Hello) error {
			if peer.JobID != "demo" {
				return fmt.Errorf("job %q, want %q", peer.JobID, "demo")
			}
			return nil
		})
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _ := net.Dial("tcp", ln.Addr().String())
	defer conn.Close()
	peer, err := Client(ctx, conn, token, Hello{Role: RoleData, JobID: "demo", Rank: 1, WorldSize: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("connected to rank %d of %d (protocol %d)\n", peer.Rank, peer.WorldSize, peer.Version)
	// Output: connected to rank 0 of 2 (protocol 2)
}

// A long refusal reason reaches the client cut to a bounded length.
func TestLongRejectReason(t *testing.T) {
	long := strings.Repeat("why ", 5000)
	c, s := handshake(t, nil, nil, workerHello, masterHello, func(Hello) error { return errors.New(long) })
	if !errors.Is(c.err, ErrRejected) || !errors.Is(s.err, ErrRejected) {
		t.Fatalf("client err %v, server err %v", c.err, s.err)
	}
	if n := len(c.err.Error()); n > maxReason+200 {
		t.Fatalf("client error is %d bytes long", n)
	}
	if !strings.Contains(c.err.Error(), "why why") {
		t.Fatalf("client error %q lost the reason", c.err)
	}
}

// freshRefusals gives the test a Limiter of its own for the package's
// refusal warnings, so that it sees its first refusal logged in full.
func freshRefusals(t *testing.T) {
	old := refusals
	refusals = NewLimiter(nil, 0)
	t.Cleanup(func() {
		refusals.Stop()
		refusals = old
	})
}
