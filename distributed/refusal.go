package distributed

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gotrain/gotrain/distributed/store"
)

// RefusedKey is the store key under which a node of job jobID that
// refuses to start (a bad flag, an address that cannot be right, a
// program it cannot run) posts why, as a JSON Refusal. It lies outside
// every restart's namespace: the refusing node never started a restart.
// Every rank of the job watches it while it joins, and fails at once
// with the reason when it is set.
func RefusedKey(jobID string) string { return "gotrain/" + jobID + "/refused" }

// Refusal is why a node refused to join the job.
type Refusal struct {
	Node   int    `json:"node"`
	Reason string `json:"reason"`
}

// Error is "node N refused: reason".
func (r Refusal) Error() string { return "node " + strconv.Itoa(r.Node) + " refused: " + r.Reason }

// PostRefusal records r for job jobID in st, unless another node's
// refusal is recorded already (the first is the cause the ranks report).
func PostRefusal(ctx context.Context, st store.Store, jobID string, r Refusal) error {
	b, err := json.Marshal(r)
	if err != nil {
		panic("distributed: marshal refusal: " + err.Error()) // an int and a string
	}
	if _, err := st.CompareAndSet(ctx, RefusedKey(jobID), nil, b); err != nil {
		return fmt.Errorf("distributed: post node %d's refusal: %w", r.Node, err)
	}
	return nil
}

// decodeRefusal parses RefusedKey's value into the failure the ranks
// report.
func decodeRefusal(b []byte) *reportedError {
	var r Refusal
	if json.Unmarshal(b, &r) != nil || r.Reason == "" {
		return &reportedError{setupFailure{Rank: -1, Config: true, Reason: "a node refused: " + string(b)}}
	}
	return &reportedError{setupFailure{Rank: -1, Config: true, Reason: r.Error()}}
}

// watchRefusal waits (until ctx ends) for a node's refusal of job jobID
// in st and cancels ctx with it. The returned channel is closed when the
// watch has ended.
func watchRefusal(ctx context.Context, st store.Store, jobID string, cancel context.CancelCauseFunc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, err := st.Get(ctx, RefusedKey(jobID))
		if err != nil {
			return // ctx ended: the rendezvous is over either way
		}
		cancel(decodeRefusal(b))
	}()
	return done
}
