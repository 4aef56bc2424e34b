package store

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/distributed/tlsconf"
)

const (
	// writeTimeout bounds writing one response: a client that stops
	// reading is disconnected rather than blocking the server.
	writeTimeout = 30 * time.Second
	// keepAlive settings detect a peer host that vanished without closing.
	keepAliveIdle     = 5 * time.Second
	keepAliveInterval = 2 * time.Second
	keepAliveCount    = 3
)

var keepAlive = net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount}

// Server is a TCP store server, like PyTorch's TCPStore master: rank 0 (or
// `gotrain store`) runs one and every rank, rank 0 included, connects to it
// with Dial. Each connection must pass the dist/auth handshake (role
// "store") with the server's token within auth.HandshakeTimeout; a wrong
// token is refused and logged. At most auth.MaxPendingHandshakes()
// connections may be in their handshake at once (more are closed at
// once), so a flood of idle connections cannot use up the descriptors of
// the process (rank 0's, which also writes the checkpoints), and its
// warnings are summarized, one line per auth.WarnInterval.
type Server struct {
	opts  options
	ln    net.Listener
	token []byte
	data  *Mem
	done  chan struct{}  // closed by Close
	wg    sync.WaitGroup // the accept loop and every connection's goroutines
	gate  *auth.Gate
	warn  *auth.Limiter

	mu     sync.Mutex // guards conns, idle
	conns  map[net.Conn]struct{}
	idle   chan struct{} // closed when conns becomes empty (for Shutdown)
	closed bool

	rmu       sync.Mutex // rmu guards onRefused, early and refusedOff
	onRefused func(remote net.Addr, err error)
	// early holds the refusals made before OnRefused was first called
	// (a misconfigured rank can be quicker than rank 0's own set-up),
	// replayed to fn when it is; at most maxEarlyRefusals.
	early      []refusal
	refusedOff bool // OnRefused(nil) was called: nothing more is kept
}

type refusal struct {
	remote net.Addr
	err    error
}

const maxEarlyRefusals = 8

// OnRefused makes the server call fn (on the connection's goroutine) for
// every client it refuses for a wrong token or protocol version: during a
// rendezvous such a client is a misconfigured rank, which cannot reach
// the store to say so itself. Refusals made since the server started and
// before the first call are passed to fn at once. nil stops the calls.
func (s *Server) OnRefused(fn func(remote net.Addr, err error)) {
	s.rmu.Lock()
	s.onRefused = fn
	early := s.early
	s.early = nil
	if fn == nil {
		s.refusedOff = true
	}
	s.rmu.Unlock()
	if fn != nil {
		for _, r := range early {
			fn(r.remote, r.err)
		}
	}
}

// refused reports a refused client to OnRefused's function, or keeps it
// for the function to come.
func (s *Server) refused(remote net.Addr, err error) {
	s.rmu.Lock()
	fn := s.onRefused
	if fn == nil && !s.refusedOff && len(s.early) < maxEarlyRefusals {
		s.early = append(s.early, refusal{remote, err})
	}
	s.rmu.Unlock()
	if fn != nil {
		fn(remote, err)
	}
}

// Listen listens on addr ("host:port"; port 0 picks a free one, see Addr)
// and serves the store on it. token is the shared secret clients must know;
// empty is allowed but authenticates nothing.
func Listen(addr string, token []byte, opts ...Option) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("store: listen on %s: %w", addr, err)
	}
	return Serve(ln, token, opts...), nil
}

// Serve serves the store on a listener the caller made; the Server owns it
// from now on and closes it in Close. With WithTLS every client must
// present a certificate signed by the CA; one that does not, or speaks
// plain TCP, is refused (and reported to OnRefused's function).
func Serve(ln net.Listener, token []byte, opts ...Option) *Server {
	s := &Server{
		opts:  makeOptions(opts),
		ln:    ln,
		token: append([]byte(nil), token...),
		data:  NewMem(),
		done:  make(chan struct{}),
		conns: make(map[net.Conn]struct{}),
		warn:  auth.NewLimiter(nil, 0),
	}
	s.gate = auth.NewGate("store", 0, s.warn)
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server now: it closes the listener and every connection,
// so clients' pending and later calls fail promptly, and waits for the
// server's goroutines to end.
func (s *Server) Close() error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	if already {
		s.wg.Wait()
		return nil
	}
	// Closing the connections (above) ends their handshakes and read
	// loops; closing the data ends their blocked Gets and Waits.
	err := s.ln.Close()
	close(s.done)
	s.data.Close()
	s.wg.Wait()
	s.warn.Stop()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Shutdown stops accepting connections and waits until every client has
// disconnected (so rank 0 does not pull the store from under ranks still
// reading it) or ctx ends, then closes the server. It returns ctx's error
// if ctx ended first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ln.Close()
	s.mu.Lock()
	var idle chan struct{}
	if len(s.conns) > 0 {
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle = s.idle
	}
	s.mu.Unlock()
	var err error
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			err = fmt.Errorf("store: shutdown with clients still connected: %w", ctx.Err())
		}
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary trouble such as too many open files: wait and retry
			// rather than spin or give up.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.warn.Warn("store: accept failed", "addr", s.ln.Addr().String(), "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-s.done:
				return
			}
		}
		backoff = 0
		handshaken, ok := s.gate.Admit(conn)
		if !ok {
			continue
		}
		if !s.track(conn) {
			handshaken()
			conn.Close()
			return
		}
		s.wg.Add(1)
		go s.serveConn(conn, handshaken)
	}
}

// track registers conn; it reports false once the server is closed.
func (s *Server) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[conn] = struct{}{}
	return true
}

func (s *Server) untrack(conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, conn)
	if len(s.conns) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// serveConn serves conn; handshaken frees its Gate slot.
func (s *Server) serveConn(conn net.Conn, handshaken func()) {
	defer s.wg.Done()
	defer s.untrack(conn)
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetKeepAliveConfig(keepAlive)
	}
	hctx, cancel := context.WithTimeout(context.Background(), auth.HandshakeTimeout)
	sconn, err := conn, error(nil)
	if s.opts.tls != nil {
		var tc *tls.Conn
		if tc, err = s.opts.tls.ServerConn(hctx, conn, conn.RemoteAddr().String(), answerPlain); err == nil {
			sconn = tc
		}
	}
	if err == nil {
		_, err = auth.Server(hctx, sconn, s.token, auth.Hello{Role: auth.RoleStore, Rank: -1, WorldSize: -1}, nil)
	}
	cancel()
	handshaken()
	if err != nil {
		if !errors.Is(err, auth.ErrAuth) && !errors.Is(err, auth.ErrTLSMismatch) && !s.isClosed() { // distributed/internal/auth logs refused tokens itself
			s.warn.Warn("store: handshake failed", "remote", conn.RemoteAddr().String(), "err", err)
		}
		if errors.Is(err, auth.ErrAuth) || errors.Is(err, auth.ErrVersion) ||
			errors.Is(err, auth.ErrTLSMismatch) || errors.Is(err, tlsconf.ErrRefused) {
			s.refused(conn.RemoteAddr(), err)
		}
		return
	}
	sc := &serverConn{s: s, conn: sconn, pending: make(map[uint64]context.CancelFunc)}
	if err := sc.serve(); err != nil && !s.isClosed() {
		slog.Warn("store: closing connection", "remote", conn.RemoteAddr(), "err", err)
	}
}

// isClosed reports whether Close has begun (it closes the connections
// before it closes done: their errors then are no news).
func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// maxBlocked bounds the Gets and Waits one connection may have blocked on
// the server at once (each holds a goroutine); more is a protocol error.
const maxBlocked = 1 << 16

// serverConn is one authenticated client connection.
type serverConn struct {
	s    *Server
	conn net.Conn
	wmu  sync.Mutex // serializes response writes

	mu      sync.Mutex // guards pending
	pending map[uint64]context.CancelFunc
}

// serve reads requests until the connection ends. It returns an error only
// for a protocol violation, not for the client hanging up.
func (sc *serverConn) serve() error {
	ctx, cancel := context.WithCancel(context.Background())
	var blocked sync.WaitGroup
	defer blocked.Wait() // runs after cancel: blocked requests end first
	defer cancel()
	br := bufio.NewReader(sc.conn)
	for {
		f, err := readFrame(br, MaxFrameSize)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, errMalformed) {
				return err
			}
			return nil // reset, timeout: the client is gone
		}
		req, err := decodeRequest(f)
		if err != nil {
			return err
		}
		switch req.op {
		case opCancel:
			sc.mu.Lock()
			if c := sc.pending[req.id]; c != nil {
				c()
			}
			sc.mu.Unlock()
		case opGet, opWait:
			rctx, rcancel := context.WithCancel(ctx)
			sc.mu.Lock()
			_, dup := sc.pending[req.id]
			full := len(sc.pending) >= maxBlocked
			if !dup && !full {
				sc.pending[req.id] = rcancel
			}
			sc.mu.Unlock()
			if dup {
				rcancel()
				return fmt.Errorf("%w: request id %d already in flight", errMalformed, req.id)
			}
			if full {
				rcancel()
				return fmt.Errorf("store: client has more than %d blocked Gets and Waits", maxBlocked)
			}
			blocked.Add(1)
			go func() {
				defer blocked.Done()
				resp := sc.s.exec(rctx, req)
				sc.mu.Lock()
				delete(sc.pending, req.id)
				sc.mu.Unlock()
				rcancel()
				if ctx.Err() == nil { // else the connection is going away
					sc.write(resp)
				}
			}()
		default:
			sc.write(sc.s.exec(ctx, req))
		}
	}
}

// write sends one response frame; a failed write closes the connection,
// which ends serve.
func (sc *serverConn) write(frame net.Buffers) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := frame.WriteTo(sc.conn); err != nil {
		sc.conn.Close()
	}
}

// exec runs req against the server's data and returns the response frame.
func (s *Server) exec(ctx context.Context, r request) net.Buffers {
	var e *encoder
	var err error
	switch r.op {
	case opSet:
		// The value aliases a frame buffer read for this request alone, so
		// the store may keep it without a copy.
		if err = s.data.setOwned(r.key, r.value); err == nil {
			e = newFrame(r.id, statusOK, 0)
		}
	case opGet:
		var v []byte
		// Stored values are never modified in place, so the reply can be
		// written from the stored slice.
		if v, err = s.data.getShared(ctx, r.key); err == nil {
			e = newFrame(r.id, statusOK, 4).tailBytes(v)
		}
	case opAdd:
		var n int64
		if n, err = s.data.Add(ctx, r.key, r.delta); err == nil {
			e = newFrame(r.id, statusOK, 8).i64(n)
		}
	case opCAS:
		var v []byte
		if v, err = s.data.CompareAndSet(ctx, r.key, r.expected, r.desired); err == nil {
			present := byte(0)
			if v != nil {
				present = 1
			}
			e = newFrame(r.id, statusOK, len(v)+5).u8(present).bytes(v)
		}
	case opWait:
		if err = s.data.Wait(ctx, r.keys...); err == nil {
			e = newFrame(r.id, statusOK, 0)
		}
	case opDelete:
		var ok bool
		if ok, err = s.data.Delete(ctx, r.key); err == nil {
			b := byte(0)
			if ok {
				b = 1
			}
			e = newFrame(r.id, statusOK, 1).u8(b)
		}
	case opNumKeys:
		var n int64
		if n, err = s.data.NumKeys(ctx); err == nil {
			e = newFrame(r.id, statusOK, 8).i64(n)
		}
	}
	if err != nil {
		msg := err.Error()
		e = newFrame(r.id, statusErr, len(msg)).bytes([]byte(msg))
	}
	return e.buffers()
}
