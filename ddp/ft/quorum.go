package ft

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Member is what a replica posts to a quorum round: who it is, the step
// its state is at (-1: it has none and must heal), and the identity of
// its model and program, which every member of a quorum must share.
type Member struct {
	ID    string `json:"id"`
	Step  int64  `json:"step"`
	Hash  string `json:"hash"`  // ShapeHash of the model (and whatever config the caller folds in)
	Build string `json:"build"` // sha256 and version of the running program
}

// Quorum is the membership of one or more steps, as every member adopts
// it.
type Quorum struct {
	// Round is the quorum round that formed it; rounds are numbered from 1
	// and every StartStep runs one.
	Round int64 `json:"round"`
	// ID increments whenever the membership changes.
	ID int64 `json:"id"`
	// Members, ordered by replica ID: a member's index is its rank in
	// the quorum's group.
	Members []Member `json:"members"`
	// MaxStep is the highest step any member is at: the step the quorum
	// trains from.
	MaxStep int64 `json:"max_step"`
	// Recover lists the members behind MaxStep, which heal from Source.
	Recover []string `json:"recover,omitempty"`
	// Source is the member at MaxStep that serves the state to Recover.
	Source string `json:"source,omitempty"`
	// HealAttempt counts consecutive rounds in which the same members
	// needed recovery; it rotates Source so that a failed transfer is
	// retried from another healthy peer.
	HealAttempt int `json:"heal_attempt,omitempty"`
	// Hash and Build are the model and program every member runs.
	Hash  string `json:"hash"`
	Build string `json:"build"`
	// Refused maps the replicas that posted but may not join to why.
	Refused map[string]string `json:"refused,omitempty"`
}

// IDs returns the members' replica IDs in rank order.
func (q *Quorum) IDs() []string {
	ids := make([]string, len(q.Members))
	for i, m := range q.Members {
		ids[i] = m.ID
	}
	return ids
}

// Index returns id's rank in the quorum, or -1.
func (q *Quorum) Index(id string) int {
	for i, m := range q.Members {
		if m.ID == id {
			return i
		}
	}
	return -1
}

// roundInput is everything a quorum decision depends on: no clock and no
// store, so that tests feed it events.
type roundInput struct {
	Round  int64
	Prev   *Quorum  // the last quorum formed; nil before the first
	Posted []Member // in the order they were posted
	// Alive reports whether a replica's heartbeat advanced within the
	// liveness bound.
	Alive func(id string) bool
	// Waited is how long the deciding replica has waited in this round.
	Waited time.Duration

	Replicas      int           // replicas expected at the start of the job
	MinReplicas   int           // fewer never form a quorum
	JoinTimeout   time.Duration // how long the first quorum waits for Replicas
	QuorumTimeout time.Duration // how long any round waits for MinReplicas
}

// decide returns the quorum of a round once it can be formed, done=false
// while it should wait for more posts, or an error once it has waited
// QuorumTimeout below MinReplicas.
//
// A round forms when every member of the previous quorum that is still
// alive has posted (a dead one is dropped once its heartbeat is older
// than the liveness bound), or, for the first quorum, when Replicas have
// posted or JoinTimeout has passed. A replica whose model hash or build
// differs from the quorum's (the previous quorum's, else the most common
// among those posted, ties to the lowest replica ID) is refused.
func decide(in roundInput) (q Quorum, done bool, err error) {
	posted := dedupe(in.Posted)
	hash, build := reference(in.Prev, posted)
	q = Quorum{Round: in.Round, Hash: hash, Build: build}
	var accepted []Member
	for _, m := range posted {
		switch {
		case m.Hash != hash:
			q.refuse(m.ID, fmt.Sprintf("replica %s has model hash %s, the quorum's is %s (another model shape or config)", m.ID, short(m.Hash), short(hash)))
		case m.Build != build:
			q.refuse(m.ID, fmt.Sprintf("replica %s runs build %s, the quorum runs %s", m.ID, short(m.Build), short(build)))
		default:
			accepted = append(accepted, m)
		}
	}
	ready := false
	if in.Prev == nil {
		ready = len(accepted) >= in.Replicas || (in.Waited >= in.JoinTimeout && len(accepted) > 0)
	} else {
		ready = len(accepted) > 0
		for _, pm := range in.Prev.Members {
			if !has(accepted, pm.ID) && in.Alive(pm.ID) {
				ready = false
			}
		}
	}
	if ready && len(accepted) < in.MinReplicas {
		ready = false
	}
	if !ready {
		if in.Waited >= in.QuorumTimeout {
			return Quorum{}, false, fmt.Errorf("quorum round %d: %d replica(s) after %v, fewer than the minimum of %d (posted: %s)",
				in.Round, len(accepted), in.QuorumTimeout, in.MinReplicas, names(accepted))
		}
		return Quorum{}, false, nil
	}
	sort.Slice(accepted, func(i, j int) bool { return accepted[i].ID < accepted[j].ID })
	q.Members = accepted
	q.ID = 1
	if in.Prev != nil {
		q.ID = in.Prev.ID
		if !slices.Equal(in.Prev.IDs(), q.IDs()) {
			q.ID++
		}
	}
	q.MaxStep = accepted[0].Step
	for _, m := range accepted {
		q.MaxStep = max(q.MaxStep, m.Step)
	}
	var healthy []string
	for _, m := range accepted {
		if m.Step < q.MaxStep {
			q.Recover = append(q.Recover, m.ID)
		} else {
			healthy = append(healthy, m.ID)
		}
	}
	if len(q.Recover) > 0 {
		if in.Prev != nil && len(in.Prev.Recover) > 0 && slices.Equal(in.Prev.Recover, q.Recover) {
			q.HealAttempt = in.Prev.HealAttempt + 1
		}
		q.Source = healthy[q.HealAttempt%len(healthy)]
	}
	return q, true, nil
}

func (q *Quorum) refuse(id, reason string) {
	if q.Refused == nil {
		q.Refused = map[string]string{}
	}
	q.Refused[id] = reason
}

// reference returns the model hash and build a quorum requires.
func reference(prev *Quorum, posted []Member) (hash, build string) {
	if prev != nil && prev.Hash != "" {
		return prev.Hash, prev.Build
	}
	return mostCommon(posted, func(m Member) string { return m.Hash }), mostCommon(posted, func(m Member) string { return m.Build })
}

// mostCommon returns the value of f held by most members, ties going to
// the value of the member with the lowest ID.
func mostCommon(ms []Member, f func(Member) string) string {
	sorted := slices.Clone(ms)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	count := map[string]int{}
	for _, m := range sorted {
		count[f(m)]++
	}
	best, n := "", 0
	for _, m := range sorted {
		if c := count[f(m)]; c > n {
			best, n = f(m), c
		}
	}
	return best
}

// dedupe keeps each replica's first post.
func dedupe(ms []Member) []Member {
	var out []Member
	for _, m := range ms {
		if !has(out, m.ID) {
			out = append(out, m)
		}
	}
	return out
}

func has(ms []Member, id string) bool {
	return slices.ContainsFunc(ms, func(m Member) bool { return m.ID == id })
}

func names(ms []Member) string {
	if len(ms) == 0 {
		return "none"
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return strings.Join(ids, ", ")
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	if s == "" {
		return "(none)"
	}
	return s
}

// commitVerdict decides a step from the members' votes once it can:
// false as soon as any member voted to discard or is dead without a
// vote, true once every member voted to commit.
func commitVerdict(members []string, votes map[string]bool, alive func(string) bool) (commit, done bool) {
	all := true
	for _, id := range members {
		v, ok := votes[id]
		switch {
		case ok && !v:
			return false, true
		case !ok && !alive(id):
			return false, true
		case !ok:
			all = false
		}
	}
	return all, all
}
