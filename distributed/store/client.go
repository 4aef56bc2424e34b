package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/internal/resolve"
)

// ErrConnLost is wrapped by the errors of a Client whose connection to the
// server ended (server closed or died, network failure).
var ErrConnLost = errors.New("store: connection to server lost")

// Client is a Store served by a TCP Server. One connection carries every
// call: each request has an id and the reply names it, so any number of
// goroutines may block in Get or Wait at once without holding up Set or Add.
// When the connection ends, every pending and later call fails at once with
// an error wrapping ErrConnLost that names the server's address.
type Client struct {
	addr string
	conn net.Conn
	done chan struct{} // closed when the read loop has ended

	wmu sync.Mutex // serializes frame writes

	mu      sync.Mutex // guards pending, nextID, err
	pending map[uint64]chan frame
	nextID  uint64
	err     error // why the client stopped, once it has
}

var _ Store = (*Client)(nil)

// Dial connects to the TCP store at addr ("host:port") and authenticates
// with token. Like torchrun's workers, it retries until the server is up
// (or ctx ends): workers may start before rank 0's server. Without a
// deadline in ctx it retries until ctx is cancelled. A refused handshake
// (wrong token, other protocol version) or a peer that does not speak the
// gotrain protocol is not retried, nor is a host name that does not
// resolve after resolve.Tries lookups: a name that is wrong does not
// become right by waiting for the server. WithTLS runs the connection
// inside mutual TLS; a TLS refusal is not retried either.
func Dial(ctx context.Context, addr string, token []byte, opts ...Option) (*Client, error) {
	o := makeOptions(opts)
	start := time.Now()
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		if _, err := resolveHost(ctx, host); err != nil {
			return nil, fmt.Errorf("store: connect to %s: %w", addr, err)
		}
	}
	d := net.Dialer{KeepAliveConfig: keepAlive}
	backoff := 10 * time.Millisecond
	var last error
	dnsFails := 0
	for attempt := 1; ; attempt++ {
		conn, err := dialTCP(ctx, &d, addr)
		if resolve.IsDNS(err) {
			// It resolved before: a resolver that fails now is given
			// the same few tries.
			if dnsFails++; dnsFails >= resolve.Tries {
				return nil, fmt.Errorf("store: connect to %s: %d lookups failed in a row: %w", addr, dnsFails, err)
			}
		} else {
			dnsFails = 0
		}
		if err == nil {
			raw := conn
			if conn, err = o.clientTLS(ctx, raw, addr); err == nil {
				_, err = auth.Client(ctx, conn, token, auth.Hello{Role: auth.RoleStore, Rank: -1, WorldSize: -1})
				if o.tls != nil {
					err = tlsconf.Explain(err, addr)
				}
			}
			if err == nil {
				return newClient(addr, conn), nil
			}
			raw.Close()
			// A refusal, or something that is not a gotrain store on that
			// port, will not change by retrying.
			if refusedForGood(err) {
				return nil, fmt.Errorf("store: connect to %s: %w", addr, err)
			}
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
			continue
		}
		return nil, fmt.Errorf("store: connect to %s: no store server reachable after %d attempts in %v: %w (last error: %v)",
			addr, attempt, time.Since(start).Round(time.Millisecond), context.Cause(ctx), last)
	}
}

// resolveHost looks up the server's host before Dial's first attempt;
// tests replace it.
var resolveHost = resolve.Host

// dialTCP makes Dial's connection attempts; tests watch them through it.
var dialTCP = dialTCPDefault

func dialTCPDefault(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
	return d.DialContext(ctx, "tcp", addr)
}

func newClient(addr string, conn net.Conn) *Client {
	c := &Client{addr: addr, conn: conn, done: make(chan struct{}), pending: make(map[uint64]chan frame)}
	go c.readLoop()
	return c
}

// readLoop delivers responses to their callers until the connection ends.
func (c *Client) readLoop() {
	defer close(c.done)
	br := bufio.NewReader(c.conn)
	for {
		f, err := readFrame(br, MaxFrameSize)
		if err != nil {
			c.fail(fmt.Errorf("%w: %s: %w", ErrConnLost, c.addr, err))
			return
		}
		c.mu.Lock()
		ch := c.pending[f.id]
		delete(c.pending, f.id)
		c.mu.Unlock()
		// No caller: it gave up (ctx) and the reply crossed its cancel.
		if ch != nil {
			ch <- f
		}
	}
}

// fail stops the client with err (the first reason sticks) and closes the
// connection, which ends readLoop.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.conn.Close()
}

// Close closes the connection; pending and later calls return ErrClosed.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	<-c.done
	return nil
}

// call sends a request and waits for its response. blocking requests
// (Get, Wait) are cancelled on the server when ctx ends.
func (c *Client) call(ctx context.Context, r request, blocking bool) (frame, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return frame{}, err
	}
	c.nextID++
	r.id = c.nextID
	ch := make(chan frame, 1)
	c.pending[r.id] = ch
	c.mu.Unlock()

	if err := c.write(ctx, encodeRequest(r).buffers()); err != nil {
		c.forget(r.id)
		return frame{}, err
	}
	select {
	case f := <-ch:
		if f.code == statusErr {
			return frame{}, fmt.Errorf("store: server %s: %s", c.addr, f.body)
		}
		if f.code != statusOK {
			err := fmt.Errorf("%w: response status %d", errMalformed, f.code)
			c.fail(fmt.Errorf("%w: %s: %w", ErrConnLost, c.addr, err))
			return frame{}, err
		}
		return f, nil
	case <-c.done:
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return frame{}, err
	case <-ctx.Done():
		c.forget(r.id)
		if blocking {
			// Best effort, bounded: if it cannot be sent the connection is
			// in trouble anyway.
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c.write(cctx, newFrame(r.id, opCancel, 0).buffers())
			cancel()
		}
		return frame{}, ctx.Err()
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// write sends one frame. A write cut short would leave half a frame on the
// wire, so a write that misses ctx's deadline (or writeTimeout, whichever
// is sooner) part-way stops the client; one that sent nothing by ctx's
// deadline only fails its call.
func (c *Client) write(ctx context.Context, bufs net.Buffers) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline := time.Now().Add(writeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.conn.SetWriteDeadline(deadline)
	if n, err := bufs.WriteTo(c.conn); err != nil {
		if d, ok := ctx.Deadline(); ok && n == 0 && !time.Now().Before(d) {
			// ctx's deadline passed before a byte went out: the stream is
			// intact and only this call is late.
			return context.DeadlineExceeded
		}
		err = fmt.Errorf("%w: %s: write: %w", ErrConnLost, c.addr, err)
		c.fail(err)
		c.mu.Lock()
		err = c.err
		c.mu.Unlock()
		return err
	}
	return nil
}

// Set implements Store.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey("set", key); err != nil {
		return err
	}
	if err := checkValue("set", key, value); err != nil {
		return err
	}
	_, err := c.call(ctx, request{op: opSet, key: key, value: value}, false)
	return c.wrap(err, "set", key)
}

// Get implements Store.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	f, err := c.call(ctx, request{op: opGet, key: key}, true)
	if err != nil {
		if ctx.Err() != nil && err == ctx.Err() {
			return nil, fmt.Errorf("%w (server %s)", waitErr(ctx, "get", key), c.addr)
		}
		return nil, c.wrap(err, "get", key)
	}
	d := &decoder{b: f.body}
	v := d.value()
	return v, c.decoded(d, "get", key)
}

// Add implements Store.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey("add", key); err != nil {
		return 0, err
	}
	f, err := c.call(ctx, request{op: opAdd, key: key, delta: delta}, false)
	if err != nil {
		return 0, c.wrap(err, "add", key)
	}
	d := &decoder{b: f.body}
	n := d.i64()
	return n, c.decoded(d, "add", key)
}

// CompareAndSet implements Store, with Mem's semantics.
func (c *Client) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := checkKey("compare-and-set", key); err != nil {
		return nil, err
	}
	if err := checkValue("compare-and-set", key, desired); err != nil {
		return nil, err
	}
	if err := checkValue("compare-and-set", key, expected); err != nil {
		return nil, err
	}
	f, err := c.call(ctx, request{op: opCAS, key: key, expected: expected, desired: desired}, false)
	if err != nil {
		return nil, c.wrap(err, "compare-and-set", key)
	}
	d := &decoder{b: f.body}
	present := d.u8()
	v := d.value()
	if present == 0 {
		v = nil
	}
	return v, c.decoded(d, "compare-and-set", key)
}

// Wait implements Store. The server waits for all keys; the error of a Wait
// that ends with ctx names the keys.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := checkKey("wait", k); err != nil {
			return err
		}
	}
	_, err := c.call(ctx, request{op: opWait, keys: keys}, true)
	if err != nil && ctx.Err() != nil && err == ctx.Err() {
		return fmt.Errorf("store: wait for %q (server %s): not all set before the context ended: %w", keys, c.addr, context.Cause(ctx))
	}
	return c.wrap(err, "wait for", fmt.Sprint(keys))
}

// Delete implements Store.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey("delete", key); err != nil {
		return false, err
	}
	f, err := c.call(ctx, request{op: opDelete, key: key}, false)
	if err != nil {
		return false, c.wrap(err, "delete", key)
	}
	d := &decoder{b: f.body}
	ok := d.u8() == 1
	return ok, c.decoded(d, "delete", key)
}

// NumKeys implements Store.
func (c *Client) NumKeys(ctx context.Context) (int64, error) {
	f, err := c.call(ctx, request{op: opNumKeys}, false)
	if err != nil {
		return 0, c.wrap(err, "num-keys", "")
	}
	d := &decoder{b: f.body}
	n := d.i64()
	return n, c.decoded(d, "num-keys", "")
}

// wrap names the operation and key in err, leaving ErrClosed bare so
// callers can compare it.
func (c *Client) wrap(err error, op, key string) error {
	if err == nil || err == ErrClosed {
		return err
	}
	if key == "" {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return fmt.Errorf("store: %s %q: %w", op, key, err)
}

// decoded checks a response body was well formed; a malformed one stops
// the client, since the stream can no longer be trusted.
func (c *Client) decoded(d *decoder, op, key string) error {
	if err := d.finish(); err != nil {
		err = fmt.Errorf("%w: %s: reply to %s %q: %w", ErrConnLost, c.addr, op, key, err)
		c.fail(err)
		return err
	}
	return nil
}
