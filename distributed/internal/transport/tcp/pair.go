package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/distributed/shm"
)

const (
	// readBufferSize is the bufio buffer in front of each connection: a
	// header and a small payload come in one read; larger payloads bypass
	// it and land straight in the destination.
	readBufferSize = 64 << 10
	// scratchSize is the piece a reducing receive reads before reducing it
	// into the destination; small enough to stay in L2 between the read
	// and the reduce.
	scratchSize = 128 << 10
	// maxAbortReason bounds the abort text kept from a peer.
	maxAbortReason = 4096
)

// pair is one connection. The reader goroutine owns br, scratch and every
// receive it has popped; wmu serialises writers.
type pair struct {
	m    *Mesh
	peer int
	addr string
	conn dataConn
	br   *bufio.Reader
	// tls: conn is TLS, whose records Send fills (see writeFrame).
	tls bool

	scratch []byte
	ring    *shm.Ring // nil: payloads go inline; guarded by wmu for writers

	wmu       sync.Mutex // wmu guards writes to conn, wdeadline, hdr and broken
	wdeadline time.Time
	hdr       [transport.HeaderSize]byte
	broken    bool   // a write failed part-way: the stream is unusable
	wbuf      []byte // header and first payload bytes of a TLS frame

	// Liveness (see heartbeat): unix nanoseconds of the last frame read
	// and written, and whether the reader holds a frame nothing was
	// posted for (then the peer is alive, just ahead of this rank).
	lastRecv atomic.Int64
	lastSend atomic.Int64
	parked   atomic.Bool
	done     chan struct{} // closed by failQueued: the pair is over

	qmu        sync.Mutex // qmu guards queue, failed, p2p and unexpected
	queue      []*transport.Recv
	signal     chan struct{} // capacity 1: "queue changed"
	failed     error
	p2p        map[int64][]*p2pRecv
	unexpected map[int64][]p2pFrame
}

// p2pRecv is a posted point-to-point receive and how much of it the
// frames of its message have filled.
type p2pRecv struct {
	*transport.Recv
	filled int
}

type p2pFrame struct {
	h       transport.Header
	payload []byte
}

func newPair(m *Mesh, peer int, addr string, c dataConn) *pair {
	_, isTLS := c.(tlsConn)
	return &pair{
		m: m, peer: peer, addr: addr, conn: c, tls: isTLS,
		br:         bufio.NewReaderSize(c, readBufferSize),
		signal:     make(chan struct{}, 1),
		done:       make(chan struct{}),
		p2p:        make(map[int64][]*p2pRecv),
		unexpected: make(map[int64][]p2pFrame),
	}
}

// Peer implements transport.Pair.
func (p *pair) Peer() int { return p.peer }

// Addr implements transport.Pair.
func (p *pair) Addr() string { return p.addr }

func (p *pair) peerErr(err error) error {
	return &transport.PeerError{Rank: p.peer, Addr: p.addr, Err: err}
}

// Send implements transport.Pair.
func (p *pair) Send(ctx context.Context, h transport.Header, payload []byte) error {
	if len(payload) > transport.MaxPayload {
		panic(fmt.Sprintf("tcp: payload of %d bytes exceeds transport.MaxPayload", len(payload)))
	}
	h.Length = uint32(len(payload))
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.m.Err(); err != nil {
		return err
	}
	if p.broken {
		return p.peerErr(fmt.Errorf("%w: an earlier write failed", transport.ErrPeerLost))
	}
	d, _ := ctx.Deadline()
	if !d.Equal(p.wdeadline) {
		p.conn.SetWriteDeadline(d)
		p.wdeadline = d
	}
	p.lastSend.Store(time.Now().UnixNano())
	if l := p.ring; l != nil && len(payload) >= shm.RingMinPayload && len(payload) <= shm.SlotSize {
		if err := l.WaitSlot(ctx, p.done); err != nil {
			if perr := p.Err(); perr != nil {
				return perr
			}
			return p.peerErr(fmt.Errorf("waiting for a free shared-memory slot: %w", err))
		}
		slot, buf := l.Take()
		copy(buf, payload)
		h.Flags |= transport.FlagShm | uint8(slot)<<transport.ShmSlotBits
		payload = nil
	}
	h.Encode(p.hdr[:])
	var err error
	if len(payload) == 0 {
		_, err = p.conn.Write(p.hdr[:])
	} else if p.tls {
		err = p.writeTLS(payload)
	} else {
		// One writev: header and payload without a copy.
		bufs := net.Buffers{p.hdr[:], payload}
		_, err = bufs.WriteTo(p.conn)
	}
	if err != nil {
		p.broken = true
		if errors.Is(err, net.ErrClosed) {
			if merr := p.m.Err(); merr != nil {
				return merr
			}
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			// A stuck peer: the operation's deadline passed.
			return p.peerErr(fmt.Errorf("write %s frame: %w", h.Kind, err))
		}
		if merr := p.awaitAbort(); merr != nil {
			return merr
		}
		return p.peerErr(fmt.Errorf("%w: write %s frame: %w", transport.ErrPeerLost, h.Kind, err))
	}
	return nil
}

// tlsRecord is the plaintext a full TLS record carries.
const tlsRecord = 16 << 10

// writeTLS writes p.hdr and payload to a TLS conn: the header and the
// payload's first bytes in one full record, so that a frame costs no
// record of its own for its header, then the rest. The caller holds wmu.
func (p *pair) writeTLS(payload []byte) error {
	n := min(len(payload), tlsRecord-len(p.hdr))
	p.wbuf = append(append(p.wbuf[:0], p.hdr[:]...), payload[:n]...)
	if _, err := p.conn.Write(p.wbuf); err != nil {
		return err
	}
	if n == len(payload) {
		return nil
	}
	_, err := p.conn.Write(payload[n:])
	return err
}

// abortGrace bounds how long a failed write waits for the mesh to fail
// for a reason the peer gave.
const abortGrace = 200 * time.Millisecond

// awaitAbort is called after a write to the peer failed. A peer that gave
// up on the group sends every rank an abort frame saying why (say, another
// rank died) and then exits, and its exit can break this connection before
// this pair's reader has read that frame. Waiting briefly for the reader
// lets the error name the cause rather than the messenger. It returns the
// mesh's error if the mesh failed meanwhile, else nil. The caller holds
// wmu; Fail marks the mesh failed before it takes any pair's wmu.
func (p *pair) awaitAbort() error {
	t := time.NewTimer(abortGrace)
	defer t.Stop()
	select {
	case <-p.m.failed:
		return p.m.Err()
	case <-t.C:
		return nil
	}
}

// abort sends a best-effort abort frame carrying code and err's text.
func (p *pair) abort(code int, err error) {
	// Kick a writer blocked on a stuck peer, then take the lock.
	p.conn.SetWriteDeadline(time.Now().Add(abortWriteTimeout))
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.broken {
		return
	}
	p.wdeadline = time.Time{}
	p.conn.SetWriteDeadline(time.Now().Add(abortWriteTimeout))
	reason := []byte(err.Error())
	if len(reason) > maxAbortReason {
		reason = reason[:maxAbortReason]
	}
	h := transport.Header{Kind: transport.KindAbort, Root: -1, Tag: int64(code), Length: uint32(len(reason))}
	h.Encode(p.hdr[:])
	bufs := net.Buffers{p.hdr[:], reason}
	if _, werr := bufs.WriteTo(p.conn); werr != nil {
		p.broken = true
	}
}

// Err implements transport.Pair.
func (p *pair) Err() error {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	return p.failed
}

// Pending implements transport.Pair.
func (p *pair) Pending() int {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	n := len(p.queue)
	for _, rs := range p.p2p {
		n += len(rs)
	}
	return n
}

// LastHeard implements transport.Pair.
func (p *pair) LastHeard() time.Time {
	if p.parked.Load() {
		return time.Now()
	}
	return time.Unix(0, p.lastRecv.Load())
}

// heartbeat runs for the pair's life. Every tick it sends a heartbeat
// frame if nothing was written for half a tick (an idle connection: a
// busy one needs none), and fails the mesh, naming the peer, before
// nothing at all has arrived from it for timeout. A reader that holds an early frame
// (parked) is not reading, so silence then proves nothing. If this
// goroutine itself did not run for several ticks (this process was
// stopped, or starved), what piled up in the socket is unread, and the
// silence is not the peer's: the count restarts.
func (p *pair) heartbeat(timeout, tick time.Duration) {
	defer p.m.readers.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	// Checked once a tick, and the failure takes up to abortWriteTimeout
	// to surface: judge that much early, so the peer is reported within
	// timeout of its last frame.
	limit := max(timeout-tick-abortWriteTimeout, timeout/2)
	for {
		select {
		case <-p.done:
			return
		case <-p.m.failed:
			return
		case now := <-t.C:
			if now.Sub(last) > 3*tick {
				p.lastRecv.Store(now.UnixNano())
			}
			last = now
			if silent := now.Sub(p.LastHeard()); silent > limit {
				p.m.failPeer(p, &transport.SilenceError{Silence: silent})
				return
			}
			if now.UnixNano()-p.lastSend.Load() >= int64(tick/2) {
				p.sendHeartbeat()
			}
		}
	}
}

// sendHeartbeat writes a heartbeat frame unless a writer holds the
// connection (then it is not idle). The write has no deadline: it blocks
// only while the peer reads nothing, and Fail's abort kicks it.
func (p *pair) sendHeartbeat() {
	if !p.wmu.TryLock() {
		return
	}
	defer p.wmu.Unlock()
	if p.broken || p.m.Err() != nil {
		return
	}
	if !p.wdeadline.IsZero() {
		p.conn.SetWriteDeadline(time.Time{})
		p.wdeadline = time.Time{}
	}
	var hb [transport.HeaderSize]byte
	(&transport.Header{Kind: transport.KindHeartbeat, Root: -1}).Encode(hb[:])
	p.lastSend.Store(time.Now().UnixNano())
	if _, err := p.conn.Write(hb[:]); err != nil {
		// The reader sees the connection's end and reports it.
		p.broken = true
	}
}

// Post implements transport.Pair.
func (p *pair) Post(r *transport.Recv) {
	p.qmu.Lock()
	if p.failed != nil {
		err := p.failed
		p.qmu.Unlock()
		r.Finish(err)
		return
	}
	p.queue = append(p.queue, r)
	p.qmu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// nextPosted pops the oldest posted receive for the frame h, waiting for
// one. It returns nil once the pair has failed, and a mismatch error if h
// cannot belong to the operation this rank runs (see Mesh.Begin).
func (p *pair) nextPosted(h *transport.Header) (*transport.Recv, error) {
	for {
		p.qmu.Lock()
		if p.failed != nil {
			p.qmu.Unlock()
			return nil, nil
		}
		if len(p.queue) > 0 {
			r := p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			if len(p.queue) == 0 {
				p.queue = p.queue[:0:0] // let the backing array go
			}
			p.qmu.Unlock()
			return r, nil
		}
		p.qmu.Unlock()
		if cur := p.m.current.Load(); cur != nil && (h.Seq < cur.Seq || h.Seq == cur.Seq && !cur.SameOp(h)) {
			return nil, &transport.MismatchError{Want: *cur, Got: *h}
		}
		p.parked.Store(true)
		<-p.signal
		p.parked.Store(false)
		p.lastRecv.Store(time.Now().UnixNano())
	}
}

func (p *pair) wake() {
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// failQueued fails every receive still queued and every later Post.
func (p *pair) failQueued(err error) {
	p.qmu.Lock()
	if p.failed != nil {
		p.qmu.Unlock()
		return
	}
	p.failed = err
	close(p.done)
	queue := p.queue
	p.queue = nil
	var p2p []*p2pRecv
	for _, rs := range p.p2p {
		p2p = append(p2p, rs...)
	}
	p.p2p = nil
	p.unexpected = nil
	p.qmu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
	for _, r := range queue {
		r.Finish(err)
	}
	for _, r := range p2p {
		r.Finish(err)
	}
}

// readLoop reads frames until the connection fails or the mesh closes.
func (p *pair) readLoop() {
	defer p.m.readers.Done()
	defer p.linger()
	p.scratch = make([]byte, scratchSize)
	var hb [transport.HeaderSize]byte
	for {
		if _, err := io.ReadFull(p.br, hb[:]); err != nil {
			p.m.failPeer(p, fmt.Errorf("%w: read frame header: %w", transport.ErrPeerLost, err))
			return
		}
		p.lastRecv.Store(time.Now().UnixNano())
		h, err := transport.Decode(hb[:])
		if err != nil {
			p.m.failPeer(p, err)
			return
		}
		switch h.Kind {
		case transport.KindCollective:
			err = p.readCollective(h)
		case transport.KindP2P:
			err = p.readP2P(h)
		case transport.KindHeartbeat:
			if h.Length != 0 {
				err = fmt.Errorf("%w: heartbeat frame with a %d-byte payload", transport.ErrMalformed, h.Length)
			}
		case transport.KindAbort:
			err = p.readAbort(h)
			var ab *transport.AbortError
			if errors.As(err, &ab) && ab.Code == transport.AbortClosed {
				// A graceful goodbye: only operations that need this peer
				// fail; the others may still complete.
				p.failQueued(p.peerErr(fmt.Errorf("%w: %w", transport.ErrPeerLost, err)))
				return
			}
		}
		if err != nil {
			p.m.failPeer(p, err)
			return
		}
	}
}

func (p *pair) readCollective(h transport.Header) error {
	r, err := p.nextPosted(&h)
	if err != nil {
		return err
	}
	if r == nil {
		return transport.ErrClosed
	}
	if !r.Want.SameOp(&h) || int(h.Length) != len(r.Buf) {
		err := &transport.MismatchError{Want: r.Want, Got: h}
		want := r.Want
		want.Length = uint32(len(r.Buf))
		err.Want = want
		r.Finish(p.peerErr(err))
		return err
	}
	if err := p.readPayload(&h, r.Buf, r.Reduce); err != nil {
		err = fmt.Errorf("%w: read %d-byte payload: %w", transport.ErrPeerLost, h.Length, err)
		r.Finish(p.peerErr(err))
		return err
	}
	r.Finish(nil)
	return nil
}

// readPayload fills buf from the connection, or reduces the payload into
// it piece by piece through scratch.
func (p *pair) readPayload(h *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	if h.Flags&transport.FlagShm != 0 {
		data, err := p.ringPayload(h)
		if err != nil {
			return err
		}
		if reduce != nil {
			reduce(buf, data)
		} else {
			copy(buf, data)
		}
		p.ring.Release()
		return nil
	}
	if reduce == nil {
		_, err := io.ReadFull(p.br, buf)
		return err
	}
	for off := 0; off < len(buf); {
		n := min(len(p.scratch), len(buf)-off)
		if _, err := io.ReadFull(p.br, p.scratch[:n]); err != nil {
			return err
		}
		reduce(buf[off:off+n], p.scratch[:n])
		off += n
	}
	return nil
}

func (p *pair) readAbort(h transport.Header) error {
	n := min(int(h.Length), maxAbortReason)
	reason := make([]byte, n)
	if _, err := io.ReadFull(p.br, reason); err != nil {
		return fmt.Errorf("%w: read abort frame: %w", transport.ErrPeerLost, err)
	}
	return &transport.AbortError{Code: int(h.Tag), Reason: string(reason)}
}

// p2pMatches reports whether frame h belongs to the message r expects.
func p2pMatches(r *p2pRecv, h *transport.Header) bool {
	return h.DType == r.Want.DType && h.Count == r.Want.Count && int(h.Length) <= len(r.Buf)-r.filled
}

// PostP2P implements transport.Pair.
func (p *pair) PostP2P(recv *transport.Recv) {
	r := &p2pRecv{Recv: recv}
	p.qmu.Lock()
	if p.failed != nil {
		err := p.failed
		p.qmu.Unlock()
		r.Finish(err)
		return
	}
	tag := r.Want.Tag
	if len(p.p2p[tag]) == 0 {
		// Consume frames that arrived before this receive. Every message
		// is at least one frame (an empty one is one empty frame), so r
		// is complete when a consumed frame fills it.
		frames := p.unexpected[tag]
		for len(frames) > 0 {
			f := frames[0]
			if !p2pMatches(r, &f.h) {
				p.qmu.Unlock()
				err := p.peerErr(&transport.MismatchError{Want: r.Want, Got: f.h})
				r.Finish(err)
				p.m.Fail(transport.AbortMismatch, err)
				return
			}
			copy(r.Buf[r.filled:], f.payload)
			r.filled += len(f.payload)
			frames = frames[1:]
			if r.filled == len(r.Buf) {
				if len(frames) == 0 {
					delete(p.unexpected, tag)
				} else {
					p.unexpected[tag] = frames
				}
				p.qmu.Unlock()
				r.Finish(nil)
				return
			}
		}
		delete(p.unexpected, tag)
	}
	p.p2p[tag] = append(p.p2p[tag], r)
	p.qmu.Unlock()
}

// readP2P delivers a point-to-point frame to the oldest receive posted for
// its tag, reading straight into it, or buffers it until one is posted.
func (p *pair) readP2P(h transport.Header) error {
	p.qmu.Lock()
	if p.failed != nil {
		p.qmu.Unlock()
		return transport.ErrClosed
	}
	posted := p.p2p[h.Tag]
	if len(posted) == 0 {
		p.qmu.Unlock()
		payload := make([]byte, h.Length) // bounded by MaxPayload
		if err := p.readPayload(&h, payload, nil); err != nil {
			return fmt.Errorf("%w: read %d-byte p2p payload: %w", transport.ErrPeerLost, h.Length, err)
		}
		p.qmu.Lock()
		defer p.qmu.Unlock()
		if p.failed != nil {
			return nil
		}
		if rs := p.p2p[h.Tag]; len(rs) > 0 && len(p.unexpected[h.Tag]) == 0 {
			// A receive was posted while the payload was being read.
			r := rs[0]
			if !p2pMatches(r, &h) {
				return &transport.MismatchError{Want: r.Want, Got: h}
			}
			copy(r.Buf[r.filled:], payload)
			r.filled += len(payload)
			if r.filled == len(r.Buf) {
				if len(rs) == 1 {
					delete(p.p2p, h.Tag)
				} else {
					p.p2p[h.Tag] = rs[1:]
				}
				r.Finish(nil)
			}
			return nil
		}
		p.unexpected[h.Tag] = append(p.unexpected[h.Tag], p2pFrame{h: h, payload: payload})
		return nil
	}
	r := posted[0]
	if !p2pMatches(r, &h) {
		p.qmu.Unlock()
		return &transport.MismatchError{Want: r.Want, Got: h}
	}
	// The reader owns r while filling it; it stays first in line for its
	// tag, and Post only appends behind it.
	p.qmu.Unlock()
	n := int(h.Length)
	if err := p.readPayload(&h, r.Buf[r.filled:r.filled+n], nil); err != nil {
		return fmt.Errorf("%w: read %d-byte p2p payload: %w", transport.ErrPeerLost, h.Length, err)
	}
	p.qmu.Lock()
	r.filled += n
	done := r.filled == len(r.Buf)
	if done && p.failed == nil {
		rest := p.p2p[h.Tag][1:]
		if len(rest) == 0 {
			delete(p.p2p, h.Tag)
		} else {
			p.p2p[h.Tag] = rest
		}
	}
	failed := p.failed != nil
	p.qmu.Unlock()
	if done && !failed {
		r.Finish(nil)
	}
	return nil
}

// linger discards what the peer still sends after the mesh failed, until
// it closes or lingerTime passes (see lingerTime).
func (p *pair) linger() {
	if p.m.Err() == nil {
		return
	}
	p.conn.SetReadDeadline(time.Now().Add(lingerTime))
	io.Copy(io.Discard, p.br)
}

// ringPayload returns the slot of the pair's shared-memory ring holding
// h's payload; the caller releases it (Ring.Release) once read.
func (p *pair) ringPayload(h *transport.Header) ([]byte, error) {
	slot := int(h.Flags&transport.ShmSlotMask) >> transport.ShmSlotBits
	if p.ring == nil || h.Length > shm.SlotSize || slot >= shm.RingSlots {
		return nil, fmt.Errorf("%w: shared-memory frame (slot %d, %d bytes) on a link without such a ring", transport.ErrMalformed, slot, h.Length)
	}
	return p.ring.In(slot)[:h.Length], nil
}
