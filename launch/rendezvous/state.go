package rendezvous

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// State is the rendezvous of one job, as the backend stores it (JSON,
// under one key). Every change is a compare-and-swap of the whole state,
// so nodes never see half of one. The functions on it are pure: they
// decide, and the Rendezvous driver reads and writes.
type State struct {
	// Seq counts writes, so that no two states written are equal bytes
	// (a compare-and-swap on the value never mistakes an old state for
	// the current one).
	Seq int64 `json:"seq"`
	// Round numbers the groups formed so far, from 0.
	Round int `json:"round"`
	// Closed says the round's Members are final: its workers run.
	Closed bool `json:"closed"`
	// Complete says a node's workers of the last round all finished: the
	// job is done, and nodes that join now exit.
	Complete bool `json:"complete,omitempty"`
	// Failed says the group used up its restarts: the job is over, and
	// every node stops.
	Failed bool `json:"failed,omitempty"`
	// Failures counts the rounds that ended because a node or a worker
	// failed (not because a node arrived): the group's restart count.
	Failures int `json:"failures"`
	// Members are the nodes of this round, in join order while it is
	// open; closing orders them by node rank (see closeRound).
	Members []Member `json:"members,omitempty"`
	// Previous are the ids of the last round's members by node rank.
	Previous []string `json:"previous,omitempty"`
	// Waiting are nodes that arrived after the round closed, asking the
	// members to re-form a larger group.
	Waiting []string `json:"waiting,omitempty"`
	// Ended and Why say why the previous round ended, for the nodes that
	// did not end it themselves and for their logs.
	Ended Reason `json:"ended,omitempty"`
	Why   string `json:"why,omitempty"`
}

// Member is a node in a round: its id, where its rank-0 worker would
// serve the job's store if it gets node rank 0, and its worker count.
type Member struct {
	ID    string `json:"id"`
	Addr  string `json:"addr"`
	Port  int    `json:"port"`
	NProc int    `json:"nproc"`
}

// Reason is why a round must end.
type Reason int

// Reasons a running round ends.
const (
	// NoChange: the round goes on.
	NoChange Reason = iota
	// Arrival: a node waits to join and the group is below MAX. Not a
	// failure: it does not count against the restart budget.
	Arrival
	// Failure: a member's heartbeat lapsed, or its workers failed.
	Failure
)

// String names the reason as the launcher's records do.
func (r Reason) String() string {
	switch r {
	case Arrival:
		return "arrival"
	case Failure:
		return "failure"
	}
	return "no change"
}

func (s State) clone() State {
	s.Members = slices.Clone(s.Members)
	s.Waiting = slices.Clone(s.Waiting)
	return s
}

// index is id's node rank in s, or -1.
func (s State) index(id string) int {
	return slices.IndexFunc(s.Members, func(m Member) bool { return m.ID == id })
}

// ids are the nodes whose liveness matters to s: its members and waiters.
func (s State) ids() []string {
	out := make([]string, 0, len(s.Members)+len(s.Waiting))
	for _, m := range s.Members {
		out = append(out, m.ID)
	}
	return append(out, s.Waiting...)
}

// assess says whether the closed round s must end: a dead member is a
// failure, a live waiter while the group is below max an arrival. why
// names the nodes.
func assess(s State, alive func(string) bool, max int) (Reason, string) {
	if !s.Closed || s.Complete {
		return NoChange, ""
	}
	var dead []string
	for _, m := range s.Members {
		if !alive(m.ID) {
			dead = append(dead, m.ID)
		}
	}
	if len(dead) > 0 {
		return Failure, "node " + strings.Join(dead, ", ") + " lost (no heartbeat)"
	}
	if len(s.Members) < max {
		for _, w := range s.Waiting {
			if alive(w) {
				return Arrival, "node " + w + " arrived"
			}
		}
	}
	return NoChange, ""
}

// next is s with round s.Round ended for reason and round s.Round+1 open
// and empty; every live node joins it afresh.
func next(s State, reason Reason, why string) State {
	n := State{Seq: s.Seq, Round: s.Round + 1, Failures: s.Failures, Ended: reason, Why: why, Previous: s.Previous}
	if s.Closed {
		n.Previous = nil
		for _, m := range s.Members {
			n.Previous = append(n.Previous, m.ID)
		}
	}
	if reason == Failure {
		n.Failures++
	}
	return n
}

// join is what node me, wanting a place, does to s: in an open round it
// drops dead members, joins, and closes the round at max nodes; a closed
// round that must end (assess) it ends and joins the next; in a closed
// round that is not its own it asks, as a waiter, for a re-form (if the
// group is below max; else it is a spare and waits). It reports whether
// s changed.
func join(s State, me Member, alive func(string) bool, max int) (State, bool) {
	if s.Complete || s.Failed {
		return s, false
	}
	s = s.clone()
	changed := false
	if s.Closed {
		if s.index(me.ID) >= 0 {
			return s, false
		}
		reason, why := assess(s, alive, max)
		if reason == NoChange {
			s.Waiting = slices.DeleteFunc(s.Waiting, func(w string) bool { return w != me.ID && !alive(w) })
			if !slices.Contains(s.Waiting, me.ID) && len(s.Members) < max {
				s.Waiting = append(s.Waiting, me.ID)
				return s, true
			}
			return s, false
		}
		s, changed = next(s, reason, why), true
	}
	before := len(s.Members)
	s.Members = slices.DeleteFunc(s.Members, func(m Member) bool { return m.ID != me.ID && !alive(m.ID) })
	changed = changed || len(s.Members) != before
	if s.index(me.ID) < 0 {
		s.Members = append(s.Members, me)
		changed = true
	}
	if len(s.Members) >= max {
		s, changed = closeRound(s), true
	}
	return s, changed
}

// closeRound closes the open round s and gives its members their node
// ranks: the last round's members keep their order, so node rank 0
// stays where it was while that node lives (with its checkpoint, if the
// nodes share no file system), and newcomers follow in join order.
func closeRound(s State) State {
	s = s.clone()
	key := func(m Member) int {
		if i := slices.Index(s.Previous, m.ID); i >= 0 {
			return i
		}
		return len(s.Previous)
	}
	slices.SortStableFunc(s.Members, func(a, b Member) int { return key(a) - key(b) })
	s.Closed, s.Waiting = true, nil
	return s
}

// encode and decode are the state's bytes in a backend.
func encode(s State) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic("rendezvous: encode state: " + err.Error()) // plain data: cannot fail
	}
	return b
}

func decode(b []byte) (State, error) {
	var s State
	if len(b) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("rendezvous: stored state is not a gotrain rendezvous (%.40q): %w", b, err)
	}
	return s, nil
}
