// Package tcp is gotrain's TCP transport: a full mesh with one connection
// per pair of ranks, rendezvoused through a store and authenticated with
// the versioned HMAC handshake of package auth.
//
// The rule that avoids duplicate-connect races: the higher rank dials, the
// lower rank accepts, so each pair is connected exactly once. Every
// connection has TCP_NODELAY set and, optionally, large socket buffers.
//
// Two ranks on the same host move large payloads through a shared-memory
// ring (package shm, whose doc says which path a message takes); the frame
// headers stay on the connection.
//
// With Options.TLS every connection runs inside mutual TLS 1.3 (package
// tlsconf), the auth handshake inside it; a frame's header shares a full
// record with the start of its payload. Payloads through a shared-memory
// ring never leave the host and are not encrypted.
//
// Liveness: a connection that has carried nothing for a moment carries a
// heartbeat frame, sent by a goroutine of its own, so a peer from which
// nothing at all arrives for Options.HeartbeatTimeout is frozen, stopped
// or cut off, and fails the mesh, named, though no socket ever reports an
// error. The hot path only stores a timestamp per frame.
package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// Options configures Connect.
type Options struct {
	// Rank and Size of this process in the mesh.
	Rank, Size int
	// Store is where ranks publish their addresses (key "addr/<rank>");
	// the caller namespaces it per job and group.
	Store store.Store
	// Token is the shared secret of the handshake.
	Token []byte
	// JobID must match on every connection.
	JobID string
	// ListenHost is the interface to listen on; "" means all interfaces.
	ListenHost string
	// AdvertiseHost is the host other ranks dial; "" means ListenHost, or
	// the loopback address if that is empty too.
	AdvertiseHost string
	// PortMin and PortMax bound the listen port (inclusive); both zero
	// means any free port.
	PortMin, PortMax int
	// PortFallback listens on any free port when every port of
	// PortMin-PortMax is taken (a default range, not one a user chose).
	PortFallback bool
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF; 0 leaves the kernel's
	// automatic tuning on.
	SocketBuffer int
	// Logger receives refused connections; nil means slog.Default().
	Logger *slog.Logger
	// HeartbeatTimeout is the liveness bound: a peer from which nothing,
	// not even a heartbeat, arrives for this long fails the mesh, naming
	// it. 0 means DefaultHeartbeatTimeout; negative turns heartbeats off.
	HeartbeatTimeout time.Duration
	// TLS, if set, runs every connection inside mutual TLS with it (the
	// token handshake inside); a peer it refuses, or one that speaks plain
	// TCP, fails the rendezvous naming it. nil means plain TCP.
	TLS *tlsconf.Config

	version int // protocol version to claim; 0 means auth.ProtocolVersion (tests set others)
}

// DefaultHeartbeatTimeout is the default liveness bound (see
// Options.HeartbeatTimeout): long enough for a loaded machine's worst
// scheduling stall, short enough that a frozen peer costs seconds.
const DefaultHeartbeatTimeout = 15 * time.Second

// heartbeatTick is how often, for a liveness bound, a pair checks its
// peer and sends a heartbeat if idle: a fifth of the bound, at most a
// second, so a silent peer is reported within the bound plus a tick.
func heartbeatTick(timeout time.Duration) time.Duration {
	return min(timeout/5, time.Second)
}

// Mesh is a connected full mesh. It implements transport.Mesh.
type Mesh struct {
	rank, size int
	pairs      []*pair // pairs[rank] is nil
	log        *slog.Logger

	mu       sync.Mutex // mu guards err
	err      error
	failDone chan struct{} // closed once the first Fail has told every peer
	failed   chan struct{} // closed when Fail starts

	readers sync.WaitGroup

	current atomic.Pointer[transport.Header] // the running collective
}

var _ transport.Mesh = (*Mesh)(nil)

// Connect listens, publishes this rank's address, connects to every other
// rank and returns the mesh once all Size-1 connections are up and
// authenticated, and each same-host pair has set up its shared-memory
// ring (package shm). ctx bounds the whole rendezvous (the connect
// timeout).
func Connect(ctx context.Context, o Options) (*Mesh, error) {
	if o.Size < 1 || o.Rank < 0 || o.Rank >= o.Size {
		return nil, fmt.Errorf("tcp: rank %d is outside world size %d", o.Rank, o.Size)
	}
	m := &Mesh{rank: o.Rank, size: o.Size, pairs: make([]*pair, o.Size), log: o.Logger,
		failDone: make(chan struct{}), failed: make(chan struct{})}
	if m.log == nil {
		m.log = slog.Default()
	}
	if o.Size == 1 {
		return m, nil
	}
	ln, err := listen(o.ListenHost, o.PortMin, o.PortMax)
	if err != nil && o.PortFallback {
		m.log.Warn("tcp: data-plane port range taken; listening on any free port", "rank", o.Rank, "err", err)
		ln, err = listen(o.ListenHost, 0, 0)
	}
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	if err := publishAddr(ctx, o, ln); err != nil {
		return nil, err
	}
	conns, addrs, err := m.connectAll(ctx, o, ln)
	if err != nil {
		return nil, err
	}
	rings, err := setupRings(ctx, o, conns, addrs)
	if err != nil {
		return nil, err
	}
	m.start(o, conns, addrs, rings)
	return m, nil
}

// publishAddr publishes in the store the address other ranks dial to
// reach ln: AdvertiseHost, else ListenHost, else loopback.
func publishAddr(ctx context.Context, o Options, ln net.Listener) error {
	host := o.AdvertiseHost
	if host == "" {
		host = o.ListenHost
	}
	if host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		host = "127.0.0.1"
	}
	port := ln.Addr().(*net.TCPAddr).Port
	self := net.JoinHostPort(host, strconv.Itoa(port))
	if err := o.Store.Set(ctx, addrKey(o.Rank), []byte(self)); err != nil {
		return fmt.Errorf("tcp: rank %d: publish address %s: %w", o.Rank, self, err)
	}
	return nil
}

// connectAll accepts the connections of higher ranks on ln and dials the
// lower ranks, all at once, and returns every authenticated connection
// (indexed by peer rank) with the address its peer listens on. On error
// it closes those it made.
func (m *Mesh) connectAll(ctx context.Context, o Options, ln net.Listener) ([]net.Conn, []string, error) {
	conns := make([]net.Conn, o.Size)
	addrs := make([]string, o.Size)
	var mu sync.Mutex // mu guards conns and addrs during setup
	errs := make(chan error, o.Size)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	// Higher ranks dial us; we dial lower ranks.
	nAccept := o.Size - 1 - o.Rank
	go func() { errs <- m.acceptAll(ctx, ln, o, nAccept, conns, addrs, &mu) }()
	for peer := 0; peer < o.Rank; peer++ {
		go func() {
			c, addr, err := dialPeer(ctx, o, peer)
			if err == nil {
				mu.Lock()
				conns[peer], addrs[peer] = c, addr
				mu.Unlock()
			}
			errs <- err
		}()
	}
	var first error
	for i := 0; i < o.Rank+1; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, nil, first
	}
	return conns, addrs, nil
}

// setupRings sets up every pair's shared-memory ring, all pairs at once,
// before any reader starts; a pair without one (another host, shared
// memory off or unavailable) gets nil. On error it closes every connection
// and unmaps every ring.
func setupRings(ctx context.Context, o Options, conns []net.Conn, addrs []string) ([]*shm.Ring, error) {
	enabled := shm.Enabled()
	rings := make([]*shm.Ring, o.Size)
	errs := make(chan error, o.Size)
	for peer, c := range conns {
		if peer == o.Rank {
			continue
		}
		go func() {
			l, err := setupRing(ctx, c, o.Rank < peer, enabled)
			if err != nil {
				err = fmt.Errorf("tcp: rank %d: set up shared memory with rank %d at %s: %w", o.Rank, peer, addrs[peer], err)
			}
			rings[peer] = l
			errs <- err
		}()
	}
	var first error
	for range o.Size - 1 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		for peer, c := range conns {
			if c != nil {
				c.Close()
			}
			rings[peer].Unmap()
		}
		return nil, first
	}
	return rings, nil
}

// setupRing runs on a new connection before its reader starts: the lower
// rank offers a ring if its peer is on the same host, and the higher rank
// maps it (see shm.OfferRing). ctx's deadline bounds the exchange.
func setupRing(ctx context.Context, c net.Conn, lower, enabled bool) (*shm.Ring, error) {
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
		defer c.SetDeadline(time.Time{})
	}
	if lower {
		return shm.OfferRing(c, enabled && sameHost(c))
	}
	return shm.AnswerRing(c, enabled)
}

// sameHost reports whether c's two ends have the same IP address.
func sameHost(c net.Conn) bool {
	la, ok1 := c.LocalAddr().(*net.TCPAddr)
	ra, ok2 := c.RemoteAddr().(*net.TCPAddr)
	return ok1 && ok2 && la.IP.Equal(ra.IP)
}

// dataConn is a data connection: a *net.TCPConn, or TLS over one.
type dataConn interface {
	net.Conn
	CloseWrite() error
}

// tlsConn is a TLS data connection whose CloseWrite shuts the TCP
// connection for writing, as a plain one's does, without a close_notify
// alert: that alert may wait seconds behind a stuck peer, and the peer
// reads the end of the stream between two records as io.EOF either way.
type tlsConn struct{ *tls.Conn }

func (c tlsConn) CloseWrite() error {
	if tc, ok := c.NetConn().(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return c.Conn.CloseWrite()
}

// start tunes every connection (TCP_NODELAY, socket buffers), makes its
// pair and starts its reader.
func (m *Mesh) start(o Options, conns []net.Conn, addrs []string, rings []*shm.Ring) {
	for peer, c := range conns {
		if peer == o.Rank {
			continue
		}
		var dc dataConn
		tc, _ := c.(*net.TCPConn)
		if t, ok := c.(*tls.Conn); ok {
			dc, tc = tlsConn{t}, t.NetConn().(*net.TCPConn)
			if peer == 0 || (o.Rank == 0 && peer == 1) {
				m.log.Debug("tcp: data plane over TLS", "rank", o.Rank, "peer", peer, "tls", tlsconf.ConnectionInfo(t.ConnectionState()))
			}
		} else {
			dc = tc
		}
		tc.SetNoDelay(true)
		if o.SocketBuffer > 0 {
			tc.SetReadBuffer(o.SocketBuffer)
			tc.SetWriteBuffer(o.SocketBuffer)
		}
		m.pairs[peer] = newPair(m, peer, addrs[peer], dc)
		m.pairs[peer].ring = rings[peer]
	}
	hb := o.HeartbeatTimeout
	if hb == 0 {
		hb = DefaultHeartbeatTimeout
	}
	now := time.Now().UnixNano()
	for _, p := range m.pairs {
		if p != nil {
			p.lastRecv.Store(now)
			p.lastSend.Store(now)
			m.readers.Add(1)
			go p.readLoop()
			if hb > 0 {
				m.readers.Add(1)
				go p.heartbeat(hb, heartbeatTick(hb))
			}
		}
	}
}

func addrKey(rank int) string { return "addr/" + strconv.Itoa(rank) }

// listen binds host on the first free port in [min, max].
func listen(host string, min, max int) (net.Listener, error) {
	if min == 0 && max == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("tcp: listen on %q: %w", host, err)
		}
		return ln, nil
	}
	if min <= 0 || max < min || max > 65535 {
		return nil, fmt.Errorf("tcp: bad listen port range %d-%d", min, max)
	}
	var last error
	for port := min; port <= max; port++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return ln, nil
		}
		last = err
	}
	return nil, fmt.Errorf("tcp: no free port in %d-%d on %q: %w", min, max, host, last)
}

// handshakeTimeout bounds one connection's handshake, so that a stray
// client that connects and says nothing cannot hold up the rendezvous.
const handshakeTimeout = auth.HandshakeTimeout

// acceptAll accepts and authenticates n connections from higher ranks,
// each handshake on its own goroutine. Connections that fail the
// handshake (wrong token, wrong job, stray clients) are logged and
// dropped; the rendezvous goes on.
func (m *Mesh) acceptAll(ctx context.Context, ln net.Listener, o Options, n int, conns []net.Conn, addrs []string, mu *sync.Mutex) error {
	hello := auth.Hello{Version: o.version, Role: auth.RoleData, JobID: o.JobID, Rank: o.Rank, WorldSize: o.Size}
	accepted := make(chan struct{}, o.Size)
	// At most a few handshakes at once: the other peers wait in the
	// listen backlog, and a flood of strays holds few descriptors.
	gate := auth.NewGate("tcp", 0, nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	// The caller closes ln when its ctx ends (context.AfterFunc), possibly
	// before cancellation reaches the child below: ask the parent whether
	// a closed listener means the rendezvous timed out.
	parent := ctx
	ctx, cancel := context.WithCancel(ctx) // ends strays' handshakes on return
	defer cancel()
	acceptErr := make(chan error, 1)
	go func() {
		for {
			if !gate.Enter(ctx) {
				acceptErr <- context.Cause(ctx)
				return
			}
			c, err := ln.Accept()
			if err != nil {
				gate.Done()
				acceptErr <- err
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer gate.Done()
				if m.handshake(ctx, c, o, hello, conns, addrs, mu) {
					accepted <- struct{}{}
				}
			}()
		}
	}()
	for got := 0; got < n; {
		select {
		case <-accepted:
			got++
		case err := <-acceptErr:
			if parent.Err() != nil {
				return fmt.Errorf("tcp: rank %d: waiting for %d more connections from higher ranks: %w", o.Rank, n-got, context.Cause(parent))
			}
			return fmt.Errorf("tcp: rank %d: accept: %w", o.Rank, err)
		case <-ctx.Done():
			ln.Close()
			<-acceptErr
			return fmt.Errorf("tcp: rank %d: waiting for %d more connections from higher ranks: %w", o.Rank, n-got, context.Cause(ctx))
		}
	}
	ln.Close() // no more peers: stop accepting
	cancel()   // nor wait for strays holding the handshake slots
	<-acceptErr
	return nil
}

// handshake authenticates one accepted connection and records it,
// reporting whether it joined the mesh.
func (m *Mesh) handshake(ctx context.Context, c net.Conn, o Options, hello auth.Hello, conns []net.Conn, addrs []string, mu *sync.Mutex) bool {
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	raw := c
	if o.TLS != nil {
		tc, err := o.TLS.ServerConn(hctx, raw, raw.RemoteAddr().String(), func(nc net.Conn) error { return auth.RequireTLS(nc) })
		if err != nil {
			raw.Close()
			if ctx.Err() == nil {
				m.log.Warn("tcp: refused data-plane connection", "rank", o.Rank, "remote", raw.RemoteAddr().String(), "err", err)
			}
			return false
		}
		c = tc
	}
	peer, err := auth.Server(hctx, c, o.Token, hello, func(p auth.Hello) error {
		switch {
		case p.JobID != o.JobID:
			return fmt.Errorf("job %q, this rank is in job %q", p.JobID, o.JobID)
		case p.WorldSize != o.Size:
			return fmt.Errorf("rank %d says world size %d, rank %d says %d", p.Rank, p.WorldSize, o.Rank, o.Size)
		case p.Rank <= o.Rank || p.Rank >= o.Size:
			return fmt.Errorf("rank %d may not dial rank %d (world size %d)", p.Rank, o.Rank, o.Size)
		}
		mu.Lock()
		defer mu.Unlock()
		if conns[p.Rank] != nil {
			return fmt.Errorf("duplicate rank %d: already connected from %s", p.Rank, addrs[p.Rank])
		}
		return nil
	})
	if err != nil {
		c.Close()
		if o.TLS != nil {
			err = tlsconf.Explain(err, c.RemoteAddr().String())
		}
		if ctx.Err() == nil {
			m.log.Warn("tcp: refused data-plane connection", "rank", o.Rank, "remote", c.RemoteAddr().String(), "err", err)
		}
		return false
	}
	// Name the peer by the address it listens on (as errors elsewhere
	// do), not by its ephemeral client port.
	addr := c.RemoteAddr().String()
	if b, err := o.Store.Get(hctx, addrKey(peer.Rank)); err == nil {
		addr = string(b)
	}
	mu.Lock()
	defer mu.Unlock()
	if conns[peer.Rank] != nil || ctx.Err() != nil { // lost a race with a duplicate, or too late
		c.Close()
		return false
	}
	conns[peer.Rank], addrs[peer.Rank] = c, addr
	return true
}

// unreachableAfter is how long dialPeer retries a peer before it reports
// the peer unreachable. The peer listens before it publishes its address,
// so a refusal or silence that lasts this long is a firewall or a wrong
// address, not a peer still starting.
const unreachableAfter = 5 * time.Second

// dialPeer looks up peer's address, dials it (retrying refused
// connections for up to unreachableAfter) and authenticates.
func dialPeer(ctx context.Context, o Options, peer int) (net.Conn, string, error) {
	b, err := o.Store.Get(ctx, addrKey(peer))
	if err != nil {
		return nil, "", fmt.Errorf("tcp: rank %d: look up address of rank %d: %w", o.Rank, peer, err)
	}
	addr := string(b)
	d := net.Dialer{Timeout: unreachableAfter}
	backoff := 10 * time.Millisecond
	giveUp := time.Now().Add(unreachableAfter)
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			raw := c
			if o.TLS != nil {
				tc, err := o.TLS.ClientConn(ctx, raw, fmt.Sprintf("%s (rank %d)", addr, peer))
				if err != nil {
					raw.Close()
					return nil, "", fmt.Errorf("tcp: rank %d: TLS handshake with rank %d at %s: %w", o.Rank, peer, addr, err)
				}
				c = tc
			}
			hello := auth.Hello{Version: o.version, Role: auth.RoleData, JobID: o.JobID, Rank: o.Rank, WorldSize: o.Size}
			srv, err := auth.Client(ctx, c, o.Token, hello)
			if err != nil {
				raw.Close()
				if o.TLS != nil {
					// TLS 1.3 reports a refused certificate at the first read.
					err = tlsconf.Explain(err, fmt.Sprintf("%s (rank %d)", addr, peer))
				}
				return nil, "", fmt.Errorf("tcp: rank %d: handshake with rank %d at %s: %w", o.Rank, peer, addr, err)
			}
			if srv.Rank != peer || srv.WorldSize != o.Size || srv.JobID != o.JobID {
				c.Close()
				return nil, "", fmt.Errorf("tcp: rank %d: %s answered as rank %d of %d in job %q, want rank %d of %d in job %q",
					o.Rank, addr, srv.Rank, srv.WorldSize, srv.JobID, peer, o.Size, o.JobID)
			}
			return c, addr, nil
		}
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("tcp: rank %d: connect to rank %d at %s: %w", o.Rank, peer, addr, err)
		}
		if time.Now().After(giveUp) {
			return nil, "", fmt.Errorf("tcp: rank %d: cannot reach rank %d at %s for %v (a firewall, or a wrong advertised address?): %w", o.Rank, peer, addr, unreachableAfter, err)
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("tcp: rank %d: connect to rank %d at %s: %w", o.Rank, peer, addr, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Rank implements transport.Mesh.
func (m *Mesh) Rank() int { return m.rank }

// Size implements transport.Mesh.
func (m *Mesh) Size() int { return m.size }

// Pair implements transport.Mesh.
func (m *Mesh) Pair(peer int) transport.Pair { return m.pairs[peer] }

// Begin implements transport.Mesh.
func (m *Mesh) Begin(h transport.Header) {
	m.current.Store(&h)
	for _, p := range m.pairs {
		if p != nil {
			p.wake()
		}
	}
}

// Err implements transport.Mesh.
func (m *Mesh) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// abortWriteTimeout bounds the best-effort abort frame to each peer.
const abortWriteTimeout = 200 * time.Millisecond

// lingerTime is how long a failed mesh keeps reading (and discarding)
// what peers still send. Closing a socket with unread data makes the
// kernel send a reset, which can destroy the abort frame just sent before
// the peer reads it; reading until the peer closes avoids that.
const lingerTime = 2 * time.Second

// Fail implements transport.Mesh. Connections stay half open (our side
// shut for writing, reads drained) until Close or the linger time ends,
// so every peer gets the abort frame.
func (m *Mesh) Fail(code int, err error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		// Return only once the peers have been told, so that a caller
		// who then closes the mesh cannot overtake the abort frames.
		<-m.failDone
		return
	}
	m.err = err
	m.mu.Unlock()
	close(m.failed)
	defer close(m.failDone)
	var wg sync.WaitGroup
	for _, p := range m.pairs {
		if p == nil {
			continue
		}
		p.failQueued(err)
		// Interrupt the reader: it releases any buffer it is filling.
		p.conn.SetReadDeadline(time.Unix(1, 0))
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.abort(code, err)
			p.conn.CloseWrite()
		}()
	}
	wg.Wait()
}

// Close implements transport.Mesh. If the mesh has not failed, each peer
// gets a goodbye frame: its operations that still need this rank fail
// with ErrPeerLost, the others complete.
func (m *Mesh) Close() error {
	m.Fail(transport.AbortClosed, fmt.Errorf("rank %d left the group (it closed its connections): %w", m.rank, transport.ErrClosed))
	for _, p := range m.pairs {
		if p != nil {
			p.conn.SetReadDeadline(time.Unix(1, 0))
			p.conn.Close()
		}
	}
	m.readers.Wait()
	for _, p := range m.pairs {
		if p != nil {
			// A writer copying into a slot holds wmu; after Fail no
			// writer starts another copy.
			p.wmu.Lock()
			p.ring.Unmap()
			p.ring = nil
			p.wmu.Unlock()
		}
	}
	return nil
}

// failPeer fails the mesh because of an error on p's connection.
func (m *Mesh) failPeer(p *pair, err error) {
	if m.Err() != nil {
		return // the mesh is already failed; this is the fallout
	}
	var ab *transport.AbortError
	code := transport.AbortPeerLost
	if errors.As(err, &ab) {
		code = ab.Code
	} else if errors.Is(err, transport.ErrMismatch) {
		code = transport.AbortMismatch
	}
	m.Fail(code, &transport.PeerError{Rank: p.peer, Addr: p.addr, Err: err})
}
