package store

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testproc"
)

// A connection that never finishes its handshake is dropped after
// auth.HandshakeTimeout, and said so in one warning.
func TestIdleHandshakeDropped(t *testing.T) {
	logs := testlog.Capture(t)
	s := startServer(t)
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(start.Add(auth.HandshakeTimeout + 5*time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the server sent something to a client that said nothing")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("an idle handshake still open %v after it began; want it dropped after %v", time.Since(start), auth.HandshakeTimeout)
	}
	if d := time.Since(start); d < auth.HandshakeTimeout-time.Second {
		t.Fatalf("an idle handshake dropped after %v, before its bound %v", d, auth.HandshakeTimeout)
	}
	// Logged on the connection's goroutine, after it closed.
	testproc.Poll(5*time.Second, func() bool { return strings.Contains(logs.String(), "store: handshake failed") })
	if !strings.Contains(logs.String(), "store: handshake failed") {
		t.Fatalf("log %q does not report the dropped handshake", logs.String())
	}
}

// Hundreds of idle connections from one host use at most half of
// auth.MaxPendingHandshakes() of the server's descriptors, leave room for
// a real client from another host at once, and give a few log lines, not
// one per connection.
func TestIdleFloodBounded(t *testing.T) {
	logs := testlog.Capture(t)
	s := startServer(t)
	const flood = 300
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// 127.0.0.2 is another host to the server, and still loopback.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	flooded := time.Now()
	for range flood {
		c, err := d.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// A real client gets in while the flood holds its slots (they time
	// out only after auth.HandshakeTimeout).
	ctx, cancel := context.WithTimeout(context.Background(), auth.HandshakeTimeout/2)
	defer cancel()
	cl, err := Dial(ctx, s.Addr().String(), testToken)
	if err != nil {
		t.Fatalf("a client could not connect during the flood: %v", err)
	}
	defer cl.Close()
	if err := cl.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Past the bound, the server closes each new connection at once: well
	// before the connections in their handshake time out.
	// (A read past its deadline fails without looking, so the reads wait
	// side by side.)
	bound := auth.MaxPendingHandshakes() / 2
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(flooded.Add(auth.HandshakeTimeout / 2))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					closed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if closed := int(closed.Load()); closed < flood-bound {
		t.Fatalf("%d of %d idle connections closed within %v; want all but the %d in their handshake", closed, flood, auth.HandshakeTimeout/2, bound)
	}
	if n := strings.Count(logs.String(), "\n"); n > 4 {
		t.Fatalf("%d log lines for a flood of %d connections; want a few:\n%s", n, flood, logs.String())
	}
}
