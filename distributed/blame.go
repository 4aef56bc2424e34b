package distributed

import (
	"context"
	"errors"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// PeerFailure says which other rank an error is the fallout of.
type PeerFailure struct {
	// Rank is the peer's rank in the group of the failed operation (the
	// global rank for the default group).
	Rank int
	// Silence is how long the peer had sent nothing, not even a
	// heartbeat, when it is blamed for falling silent; 0 otherwise.
	Silence time.Duration
}

// Blame reports whether err failed this rank only because of another
// rank, and which: the peer whose connection ended, that left or aborted
// the group, that fell silent past the heartbeat bound, or that an
// operation timed out waiting for. This rank's own failures are not
// blamed on a peer: a collective mismatch (both sides report it), a
// cancelled context (a signal to this process, or its own decision to
// stop), a destroyed group, or any error that names no peer.
func Blame(err error) (PeerFailure, bool) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrMismatch) {
		return PeerFailure{}, false
	}
	if !errors.Is(err, ErrPeerLost) && !errors.Is(err, ErrAborted) && !errors.Is(err, ErrTimeout) &&
		!errors.Is(err, transport.ErrPeerLost) && !errors.Is(err, transport.ErrAborted) {
		return PeerFailure{}, false
	}
	var pe *transport.PeerError
	if !errors.As(err, &pe) {
		return PeerFailure{}, false
	}
	pf := PeerFailure{Rank: pe.Rank}
	var se *transport.SilenceError
	if errors.As(pe, &se) {
		pf.Silence = se.Silence
	}
	return pf, true
}
