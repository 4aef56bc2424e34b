package distributed

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// TestBlame: which errors Blame puts on a peer, built as the group builds
// them (the process tests in liveness_test.go see the real ones).
func TestBlame(t *testing.T) {
	op := func(sentinel, err error) error {
		return &OpError{Rank: 0, Op: "allreduce", Seq: 3, DType: "float32", Count: 4, Sentinel: sentinel, Err: err}
	}
	peer := func(rank int, err error) error {
		return &transport.PeerError{Rank: rank, Addr: "10.0.0.2:29601", Err: err}
	}
	left := fmt.Errorf("%w: rank 2 left the group (it closed its connections): %w",
		&transport.AbortError{Code: transport.AbortClosed, Reason: "left"}, transport.ErrClosed)
	for _, tc := range []struct {
		name    string
		err     error
		ok      bool
		rank    int
		silence time.Duration
	}{
		{"left", op(ErrPeerLost, peer(2, left)), true, 2, 0},
		{"silent", op(ErrPeerLost, peer(1, &transport.SilenceError{Silence: 3 * time.Second})), true, 1, 3 * time.Second},
		{"timed out waiting", op(ErrTimeout, peer(3, fmt.Errorf("waiting for data: %w", context.DeadlineExceeded))), true, 3, 0},
		{"wrapped by the caller", fmt.Errorf("ddp: bucket 0: %w", op(ErrPeerLost, peer(2, transport.ErrPeerLost))), true, 2, 0},
		{"cancelled here", op(context.Canceled, peer(1, fmt.Errorf("waiting for data: %w", context.Canceled))), false, 0, 0},
		{"mismatch", op(ErrMismatch, peer(1, &transport.MismatchError{})), false, 0, 0},
		{"closed here", op(ErrGroupClosed, ErrGroupClosed), false, 0, 0},
		{"no peer", op(ErrPeerLost, transport.ErrPeerLost), false, 0, 0},
		{"not distributed", errors.New("write m.safetensors: no space left on device"), false, 0, 0},
		{"nil", nil, false, 0, 0},
	} {
		pf, ok := Blame(tc.err)
		if ok != tc.ok || ok && (pf.Rank != tc.rank || pf.Silence != tc.silence) {
			t.Errorf("%s: Blame = %+v, %v; want rank %d, silence %v, %v", tc.name, pf, ok, tc.rank, tc.silence, tc.ok)
		}
	}
}
