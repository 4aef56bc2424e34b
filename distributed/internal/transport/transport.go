// Package transport defines what gotrain's collective algorithms need of a
// network: a mesh of ordered, full-duplex, authenticated pairs that move
// framed byte buffers. It knows nothing of algorithms: it carries each
// frame's operation identity (op, dtype, reduce op, root, sequence number,
// count, tag) without interpreting it, except to compare a received header
// with the one a receive expects.
//
// Implementations live in subpackages (tcp). Each pair runs one reader
// that delivers collective frames, in order, into receives posted in
// advance (so data lands straight in the caller's buffer, or is reduced
// straight from a small receive buffer into it), matches point-to-point
// frames to receives by tag, and turns an abort frame, EOF or reset, or a
// peer's silence past the liveness bound (heartbeat frames keep idle
// connections talking), into an error that fails every pending and later
// receive of the whole mesh. A peer's goodbye (it closed its mesh) fails
// only what needs that peer.
package transport

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrPeerLost means a peer's connection ended (EOF, reset, write error).
	ErrPeerLost = errors.New("transport: peer lost")
	// ErrMalformed means a peer sent a frame that breaks the format.
	ErrMalformed = errors.New("transport: malformed frame")
	// ErrMismatch means a peer's frame belongs to another operation than
	// the one this rank is running.
	ErrMismatch = errors.New("transport: operation mismatch")
	// ErrAborted means a peer gave up on the group and said why.
	ErrAborted = errors.New("transport: aborted by peer")
	// ErrClosed means the mesh was closed locally.
	ErrClosed = errors.New("transport: closed")
)

// Abort codes carried in an abort frame's Tag, so the receiver can tell
// why a peer gave up.
const (
	AbortOther    = 0
	AbortMismatch = 1
	AbortTimeout  = 2
	AbortPeerLost = 3
	AbortClosed   = 4
)

// PeerError is a failure attributed to one peer.
type PeerError struct {
	Rank int    // the peer's rank
	Addr string // the peer's data-plane address
	Err  error
}

// Error names the peer and the cause.
func (e *PeerError) Error() string {
	return fmt.Sprintf("peer rank %d (%s): %v", e.Rank, e.Addr, e.Err)
}

// Unwrap returns the cause.
func (e *PeerError) Unwrap() error { return e.Err }

// MismatchError reports a received frame whose operation differs from the
// one this rank expected. It wraps ErrMismatch.
type MismatchError struct {
	Want, Got Header
}

// Error shows both headers.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: expected %+v, received %+v", ErrMismatch, e.Want, e.Got)
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// AbortError is a peer's abort frame: Code is one of the Abort constants
// and Reason the peer's own error text. It wraps ErrAborted.
type AbortError struct {
	Code   int
	Reason string
}

// Error carries the peer's reason.
func (e *AbortError) Error() string { return fmt.Sprintf("%v: %s", ErrAborted, e.Reason) }

// Unwrap returns ErrAborted.
func (e *AbortError) Unwrap() error { return ErrAborted }

// ReduceFunc combines src into dst element-wise (dst = dst ⊕ src). Both
// have the same length, a multiple of the element size; src is only valid
// during the call.
type ReduceFunc func(dst, src []byte)

// Recv is a posted receive. The pair fills Buf (or reduces into it) from
// the matching frames and then completes it; until Done is closed the
// pair owns Buf and the caller must not touch it.
type Recv struct {
	Want   Header     // the operation the frames must belong to
	Buf    []byte     // destination; its length is the payload expected
	Reduce ReduceFunc // if not nil, payload is reduced into Buf instead of copied

	done chan struct{}
	err  error
}

// NewRecv returns a receive ready to be posted.
func NewRecv(want Header, buf []byte, reduce ReduceFunc) *Recv {
	return &Recv{Want: want, Buf: buf, Reduce: reduce, done: make(chan struct{})}
}

// Finish completes r with err (nil on success). Only the pair calls it,
// exactly once.
func (r *Recv) Finish(err error) {
	r.err = err
	close(r.done)
}

// Done is closed when r completes.
func (r *Recv) Done() <-chan struct{} { return r.done }

// Err is r's outcome; valid after Done is closed.
func (r *Recv) Err() error { return r.err }

// Pair is an ordered, full-duplex connection to one peer.
type Pair interface {
	// Peer is the peer's rank.
	Peer() int
	// Addr is the peer's data-plane address.
	Addr() string
	// Send writes one frame: h (whose Length is set from payload) followed
	// by payload, which must not exceed MaxPayload. It returns once the
	// payload has been handed to the network, so the caller may then reuse
	// it. ctx's deadline bounds a blocked write. Safe for concurrent use;
	// concurrent frames are not interleaved.
	Send(ctx context.Context, h Header, payload []byte) error
	// Post queues r for the next collective frame from this peer. Frames
	// fill posted receives in posting order, one frame each. If the mesh
	// has failed, r completes at once with the mesh's error.
	Post(r *Recv)
	// PostP2P queues r for point-to-point frames with tag r.Want.Tag; it
	// completes when Buf is full. Frames that arrive before a receive is
	// posted are buffered.
	PostP2P(r *Recv)
	// Err returns the error that ended this pair — the peer's goodbye
	// (it closed the mesh), or the mesh's failure — or nil while the pair
	// works. Waits that do not go through the pair (shared memory) poll
	// it to notice a peer that left.
	Err() error
	// LastHeard is when a frame or heartbeat from the peer last arrived
	// (or, while this rank holds a frame from it that nothing was posted
	// for, now: the peer is evidently alive).
	LastHeard() time.Time
	// Pending is the number of posted receives still waiting for frames
	// from the peer (a receive being filled aside); for reports of what a
	// long wait waits for.
	Pending() int
}

// Mesh connects a rank to every other rank of a group.
type Mesh interface {
	// Rank is this process's rank in the mesh; Size the number of ranks.
	Rank() int
	Size() int
	// Pair returns the connection to rank peer (not this rank).
	Pair(peer int) Pair
	// Begin announces the collective operation this rank now runs (its
	// frames' header, Length aside). A reader holding a frame that nothing
	// was posted for compares it: a frame of an earlier operation, or of
	// this one with another identity, is a mismatch, detected even when
	// the two ranks never exchange frames in the mismatched operation.
	Begin(h Header)
	// Err returns the error that failed the mesh, or nil.
	Err() error
	// Fail marks the mesh failed with err, sends an abort frame with code
	// and err's text to every peer (best effort), and fails every pending
	// receive. Later calls keep the first error.
	Fail(code int, err error)
	// Close fails the mesh with ErrClosed if it has not failed, closes
	// every connection and waits for the readers to exit.
	Close() error
}
