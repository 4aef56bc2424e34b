package distributed

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// Sentinel errors; match them with errors.Is. Operation errors are
// *OpError values that wrap one of these and the underlying cause.
var (
	// ErrGroupClosed is returned by operations on a destroyed group.
	ErrGroupClosed = errors.New("distributed: group closed")
	// ErrPeerLost means a peer's connection ended (the process died, the
	// network failed, or the peer destroyed the group) or the peer fell
	// silent past the heartbeat timeout (frozen, or unreachable). The group is then
	// unusable: every pending and later operation fails.
	ErrPeerLost = errors.New("distributed: peer lost")
	// ErrTimeout means an operation did not finish within Config.Timeout
	// (a live but stuck peer) or its context's deadline.
	ErrTimeout = errors.New("distributed: operation timed out")
	// ErrMismatch means ranks issued different collectives (operation,
	// element type, count, reduce op or root) at the same point in the
	// sequence. It is detected from frame headers and reported on every
	// rank.
	ErrMismatch = errors.New("distributed: collective mismatch")
	// ErrAborted means the operation was abandoned because a peer gave
	// up on the group for a reason other than the above.
	ErrAborted = errors.New("distributed: group aborted")
	// ErrUnsupportedType means a buffer is not []float32, []float64,
	// []int32 or []int64.
	ErrUnsupportedType = errors.New("distributed: unsupported buffer type")
	// ErrNotMember is returned by NewGroup on ranks not in the new group.
	ErrNotMember = errors.New("distributed: rank is not a member of the group")
	// ErrConfig means the configuration or environment is invalid.
	ErrConfig = errors.New("distributed: invalid configuration")
)

// OpError describes a failed operation: which rank, which operation (its
// sequence number in the group, element type, count and root), and why.
// It wraps the sentinel (ErrPeerLost, ErrTimeout, ...) and the cause, so
// errors.Is and errors.As see both; the cause names the peer rank and its
// address when one is involved.
type OpError struct {
	Rank     int    // this process's rank in the group
	Group    string // the group's id ("" for the default group)
	Op       string // e.g. "allreduce"
	Seq      uint64 // sequence number of the operation in the group
	DType    string
	Count    int // element count of this rank's buffer
	Detail   string
	Sentinel error
	Err      error
}

// Error reads "distributed: rank R: op #seq (dtype ×count, details): sentinel: cause".
func (e *OpError) Error() string {
	g := ""
	if e.Group != "" {
		g = " group " + e.Group
	}
	var s string
	if e.DType == "none" { // barrier
		s = fmt.Sprintf("distributed: rank %d%s: %s #%d", e.Rank, g, e.Op, e.Seq)
	} else {
		s = fmt.Sprintf("distributed: rank %d%s: %s #%d (%s ×%d%s)", e.Rank, g, e.Op, e.Seq, e.DType, e.Count, e.Detail)
	}
	if e.Sentinel != nil && e.Sentinel != e.Err {
		s += ": " + trimPrefix(e.Sentinel.Error())
	}
	return s + ": " + e.Err.Error()
}

func trimPrefix(s string) string {
	const p = "distributed: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// Unwrap returns the sentinel and the cause.
func (e *OpError) Unwrap() []error {
	if e.Sentinel == nil {
		return []error{e.Err}
	}
	return []error{e.Sentinel, e.Err}
}

// classify maps an algorithm's error to a sentinel and the abort code that
// tells peers why this rank gives up.
func classify(err error) (sentinel error, code int) {
	var ab *transport.AbortError
	if errors.As(err, &ab) {
		switch ab.Code {
		case transport.AbortMismatch:
			return ErrMismatch, ab.Code
		case transport.AbortTimeout:
			return ErrTimeout, ab.Code
		case transport.AbortPeerLost, transport.AbortClosed:
			return ErrPeerLost, transport.AbortPeerLost
		}
		return ErrAborted, ab.Code
	}
	switch {
	case errors.Is(err, transport.ErrMismatch):
		return ErrMismatch, transport.AbortMismatch
	case errors.Is(err, transport.ErrPeerLost), errors.Is(err, transport.ErrMalformed):
		return ErrPeerLost, transport.AbortPeerLost
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return ErrTimeout, transport.AbortTimeout
	case errors.Is(err, transport.ErrClosed), errors.Is(err, ErrGroupClosed):
		return ErrGroupClosed, transport.AbortClosed
	case errors.Is(err, context.Canceled):
		return context.Canceled, transport.AbortOther
	}
	return nil, transport.AbortOther
}

// describeMismatch turns a transport mismatch into the two operations'
// names, so both ranks' reports say what each side called.
func describeMismatch(err error) string {
	var me *transport.MismatchError
	var pe *transport.PeerError
	if !errors.As(err, &me) || !errors.As(err, &pe) {
		return ""
	}
	return fmt.Sprintf("this rank expected %s, peer rank %d (%s) sent %s",
		describeHeader(&me.Want), pe.Rank, pe.Addr, describeHeader(&me.Got))
}

func describeHeader(h *transport.Header) string {
	if h.Kind == transport.KindP2P {
		return fmt.Sprintf("p2p message (tag %d, %v ×%d)", h.Tag, dtype(h.DType), h.Count)
	}
	s := fmt.Sprintf("%v #%d (%v ×%d", opKind(h.Op), h.Seq, dtype(h.DType), h.Count)
	switch opKind(h.Op) {
	case opAllReduce, opReduce, opReduceScatter:
		s += ", " + ReduceOp(h.RedOp).String()
	}
	if h.Root >= 0 {
		s += fmt.Sprintf(", root %d", h.Root)
	}
	return s + ")"
}
