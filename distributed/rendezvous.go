package distributed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
)

// failureKey is the key, in a group's store namespace, under which the
// first rank to find a setup mistake records it for the others.
const failureKey = "rendezvous_failure"

// failureIO bounds the store calls that record a failure and list the
// missing ranks, which run after the rendezvous has already failed.
const failureIO = time.Second

// failureLinger is how long rank 0 keeps serving the store after its
// rendezvous failed, so that ranks that connect late still read the
// recorded failure instead of waiting for a store that is gone.
const failureLinger = time.Second

// maxListed bounds how many missing ranks an error lists.
const maxListed = 16

// setupFailure is what failureKey holds (as JSON).
type setupFailure struct {
	Rank   int    `json:"rank"`   // the rank that found it; -1 for rank 0's store server
	Config bool   `json:"config"` // a configuration mistake: the error matches ErrConfig
	Reason string `json:"reason"`
}

// reportedError is the error of a rank whose rendezvous failed because
// another rank (or the store) recorded a mistake.
type reportedError struct{ f setupFailure }

func (e *reportedError) Error() string {
	if e.f.Rank < 0 {
		return e.f.Reason
	}
	return "rank " + strconv.Itoa(e.f.Rank) + " reported: " + e.f.Reason
}

// Unwrap makes a reported configuration mistake match ErrConfig.
func (e *reportedError) Unwrap() error {
	if e.f.Config {
		return ErrConfig
	}
	return nil
}

// failureReason is err's text for the other ranks, without the prefixes
// that their "rank N reported:" says already.
func failureReason(err error, where string) string {
	s := strings.TrimPrefix(err.Error(), ErrConfig.Error()+": ")
	return strings.TrimPrefix(s, where+": ")
}

// recordFailure records f unless a failure is recorded already: the first
// one is the cause, later ones its fallout.
func recordFailure(st store.Store, f setupFailure) {
	b, err := json.Marshal(f)
	if err != nil {
		panic("distributed: marshal setup failure: " + err.Error()) // a struct of strings and ints
	}
	ctx, cancel := context.WithTimeout(context.Background(), failureIO)
	defer cancel()
	_, _ = st.CompareAndSet(ctx, failureKey, nil, b) // best effort: the store may be what failed
}

// settleTime is how long a rank whose rendezvous broke for no reason of
// its own (a peer closed a connection) waits for the peer's reason to be
// recorded: the peer closes its connections before it records.
const settleTime = 300 * time.Millisecond

// settledFailure returns the failure another rank records within
// settleTime, if err is such fallout (not a mistake of this rank's, nor
// the end of the caller's context); else nil.
func settledFailure(st store.Store, err error) *reportedError {
	if errors.Is(err, ErrConfig) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTime)
	defer cancel()
	b, gerr := st.Get(ctx, failureKey)
	if gerr != nil {
		return nil
	}
	return decodeFailure(b)
}

// decodeFailure parses failureKey's value.
func decodeFailure(b []byte) *reportedError {
	var f setupFailure
	if json.Unmarshal(b, &f) != nil {
		f = setupFailure{Rank: -1, Reason: string(b)}
	}
	return &reportedError{f}
}

// watchFailure waits (until ctx ends) for a recorded failure and cancels
// ctx with it. The returned channel is closed when the watch has ended.
func watchFailure(ctx context.Context, st store.Store, cancel context.CancelCauseFunc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, err := st.Get(ctx, failureKey)
		if err != nil {
			return // ctx ended: the rendezvous is over either way
		}
		cancel(decodeFailure(b))
	}()
	return done
}

// missingRanks lists the ranks of a world of size that have not
// registered in st ("" if all have, or if the store cannot say).
func missingRanks(st store.Store, size int) string {
	ctx, cancel := context.WithTimeout(context.Background(), failureIO)
	defer cancel()
	var missing []string
	n := 0
	for r := range size {
		// Adding 0 reads the counter; an absent one reads as 0, which a
		// late joiner's Add(1) still turns into 1.
		v, err := st.Add(ctx, "rank/"+strconv.Itoa(r), 0)
		if err != nil {
			return ""
		}
		if v == 0 {
			if n < maxListed {
				missing = append(missing, strconv.Itoa(r))
			}
			n++
		}
	}
	if n > maxListed {
		missing = append(missing, fmt.Sprintf("and %d more", n-maxListed))
	}
	return strings.Join(missing, ", ")
}

// storeHint is what to check when rank 0's store stayed out of reach
// for the whole connect timeout (err is store.Dial's): "" for any other
// failure, which names its own cause.
func storeHint(err error) string {
	if !errors.Is(err, context.DeadlineExceeded) {
		return ""
	}
	return ": is node 0 running, with the same master address and port as this node? (a node 0 that refused to start says why in its own output)"
}

// notJoinedHint is what to check about ranks that never registered when
// the rendezvous ran out of time (err): "" when another cause ended it.
func notJoinedHint(err error) string {
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, new(*reportedError)) {
		return ""
	}
	return "; they never reached this store: is their node running, with this master address and port? (a node that refused to start says why in its own output)"
}
