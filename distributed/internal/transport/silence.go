package transport

import (
	"fmt"
	"time"
)

// SilenceError is a peer that sent nothing, not even a heartbeat, for
// Silence: frozen, stopped, or cut off. It wraps ErrPeerLost.
type SilenceError struct {
	Silence time.Duration
}

// Error says how long the peer was silent and what that may mean.
func (e *SilenceError) Error() string {
	return fmt.Sprintf("%v: nothing received for %v, not even a heartbeat: the process is frozen or stopped, "+
		"or the network to it is down (GOTRAIN_HEARTBEAT_TIMEOUT sets this bound)", ErrPeerLost, e.Silence.Round(time.Millisecond))
}

// Unwrap returns ErrPeerLost.
func (e *SilenceError) Unwrap() error { return ErrPeerLost }
