package ft

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const liveBound = 2 * time.Second

func mem(id string, step int64) Member { return Member{ID: id, Step: step, Hash: "h", Build: "b"} }

func input(prev *Quorum, waited time.Duration, dead []string, posted ...Member) roundInput {
	round := int64(1)
	if prev != nil {
		round = prev.Round + 1
	}
	return roundInput{
		Round: round, Prev: prev, Posted: posted,
		Alive:  func(id string) bool { return !slices.Contains(dead, id) },
		Waited: waited, Replicas: 3, MinReplicas: 1,
		JoinTimeout: 8 * time.Second, QuorumTimeout: 20 * time.Second,
	}
}

func mustDecide(t *testing.T, in roundInput) Quorum {
	t.Helper()
	q, done, err := decide(in)
	if err != nil || !done {
		t.Fatalf("decide(round %d, posted %s) = done %v, err %v; want a quorum", in.Round, names(in.Posted), done, err)
	}
	return q
}

func mustWait(t *testing.T, in roundInput) {
	t.Helper()
	q, done, err := decide(in)
	if err != nil || done {
		t.Fatalf("decide(round %d, posted %s) = %+v, done %v, err %v; want to wait", in.Round, names(in.Posted), q, done, err)
	}
}

// TestQuorumLifecycle drives one job through start, a death, a replacement
// and a late join, checking the quorum ID, ranks and recovery at each.
func TestQuorumLifecycle(t *testing.T) {
	// First round: waits for the three replicas.
	mustWait(t, input(nil, time.Second, nil, mem("r1", 0), mem("r0", 0)))
	q1 := mustDecide(t, input(nil, time.Second, nil, mem("r1", 0), mem("r2", 0), mem("r0", 0)))
	if q1.ID != 1 || !slices.Equal(q1.IDs(), []string{"r0", "r1", "r2"}) || len(q1.Recover) != 0 || q1.Source != "" {
		t.Fatalf("first quorum = %+v; want ID 1, members r0 r1 r2 in ID order, nothing to heal", q1)
	}
	// Same members next step: same ID, no group rebuild.
	q2 := mustDecide(t, input(&q1, 0, nil, mem("r2", 1), mem("r0", 1), mem("r1", 1)))
	if q2.ID != 1 || q2.MaxStep != 1 {
		t.Fatalf("unchanged quorum = %+v; want ID 1 at step 1", q2)
	}
	// r1 dies: the round waits while its heartbeat is fresh, forms without
	// it once it is stale.
	mustWait(t, input(&q2, time.Second, nil, mem("r0", 1), mem("r2", 1)))
	q3 := mustDecide(t, input(&q2, liveBound, []string{"r1"}, mem("r0", 1), mem("r2", 1)))
	if q3.ID != 2 || !slices.Equal(q3.IDs(), []string{"r0", "r2"}) || q3.Index("r2") != 1 || q3.Index("r1") != -1 {
		t.Fatalf("quorum after r1 died = %+v; want ID 2, members r0 r2", q3)
	}
	// A replacement r1 posts step -1: it joins and heals from r0, the
	// lowest-ID member at the max step.
	q4 := mustDecide(t, input(&q3, 0, nil, mem("r1", -1), mem("r0", 5), mem("r2", 5)))
	if q4.ID != 3 || q4.MaxStep != 5 || !slices.Equal(q4.Recover, []string{"r1"}) || q4.Source != "r0" || q4.Index("r1") != 1 {
		t.Fatalf("quorum with a replacement = %+v; want ID 3 at step 5, r1 (rank 1) healing from r0", q4)
	}
	// The heal failed (r0 died while serving): the retry comes from r2.
	q5 := mustDecide(t, input(&q4, liveBound, []string{"r0"}, mem("r1", -1), mem("r2", 5)))
	if q5.Source != "r2" || q5.ID != 4 || q5.HealAttempt != 1 {
		t.Fatalf("retried heal = %+v; want source r2, ID 4, attempt 1", q5)
	}
	// Same members, same heal pending again (a failed transfer from a live
	// source): the source rotates.
	q6 := mustDecide(t, input(&Quorum{Round: 9, ID: 7, Members: []Member{mem("a", 3), mem("b", 3), mem("c", -1)}, Recover: []string{"c"}, Source: "a", Hash: "h", Build: "b"},
		0, nil, mem("a", 3), mem("b", 3), mem("c", -1)))
	if q6.Source != "b" || q6.ID != 7 {
		t.Fatalf("second attempt of the same heal = %+v; want source b, ID unchanged", q6)
	}
}

// TestQuorumFirstRoundJoinTimeout forms the first quorum with the
// replicas present once the join timeout passes.
func TestQuorumFirstRoundJoinTimeout(t *testing.T) {
	mustWait(t, input(nil, 7*time.Second, nil, mem("r0", 0), mem("r2", 0)))
	q := mustDecide(t, input(nil, 8*time.Second, nil, mem("r0", 0), mem("r2", 0)))
	if !slices.Equal(q.IDs(), []string{"r0", "r2"}) {
		t.Fatalf("members = %v; want r0 r2", q.IDs())
	}
}

// TestQuorumMinReplicas waits below the minimum and fails at the quorum
// timeout naming the count and the minimum.
func TestQuorumMinReplicas(t *testing.T) {
	prev := &Quorum{Round: 4, ID: 2, Members: []Member{mem("r0", 3), mem("r1", 3)}, Hash: "h", Build: "b"}
	in := input(prev, liveBound, []string{"r1"}, mem("r0", 3))
	in.MinReplicas = 2
	mustWait(t, in)
	in.Waited = 20 * time.Second
	_, done, err := decide(in)
	if done || err == nil || !strings.Contains(err.Error(), "1 replica(s)") || !strings.Contains(err.Error(), "minimum of 2") || !strings.Contains(err.Error(), "r0") {
		t.Fatalf("decide below MinReplicas at the timeout = done %v, err %v; want an error naming 1 replica, the minimum 2, r0", done, err)
	}
}

// TestQuorumRefusals refuses a replica with another model or build,
// naming it, and forms the quorum without it.
func TestQuorumRefusals(t *testing.T) {
	odd := mem("r9", 0)
	odd.Hash = "another-shape-hash"
	other := mem("r8", 0)
	other.Build = "sha-of-another-build"
	in := input(nil, 0, nil, mem("r0", 0), odd, mem("r1", 0), other, mem("r2", 0))
	q := mustDecide(t, in)
	if !slices.Equal(q.IDs(), []string{"r0", "r1", "r2"}) {
		t.Fatalf("members = %v; want r0 r1 r2", q.IDs())
	}
	if why := q.Refused["r9"]; !strings.Contains(why, "model hash another-sha") || !strings.Contains(why, "r9") {
		t.Errorf("refusal of r9 = %q; want it to name r9 and its model hash", why)
	}
	if why := q.Refused["r8"]; !strings.Contains(why, "build sha-of-anoth") {
		t.Errorf("refusal of r8 = %q; want it to name its build", why)
	}
	// Later rounds hold to the quorum's hash even if the odd one is first.
	q2 := mustDecide(t, input(&q, 0, nil, odd, mem("r0", 1), mem("r1", 1), mem("r2", 1)))
	if _, ok := q2.Refused["r9"]; !ok || q2.Index("r9") != -1 {
		t.Fatalf("round 2 = %+v; want r9 refused", q2)
	}
}

// TestCommitVerdict decides a step from votes and liveness.
func TestCommitVerdict(t *testing.T) {
	ids := []string{"a", "b", "c"}
	alive := func(dead ...string) func(string) bool {
		return func(id string) bool { return !slices.Contains(dead, id) }
	}
	for _, c := range []struct {
		name         string
		votes        map[string]bool
		dead         []string
		commit, done bool
	}{
		{"all voted commit", map[string]bool{"a": true, "b": true, "c": true}, nil, true, true},
		{"one missing, alive", map[string]bool{"a": true, "b": true}, nil, false, false},
		{"one missing, dead", map[string]bool{"a": true, "b": true}, []string{"c"}, false, true},
		{"one voted discard", map[string]bool{"a": false}, nil, false, true},
		{"dead after voting commit", map[string]bool{"a": true, "b": true, "c": true}, []string{"c"}, true, true},
	} {
		commit, done := commitVerdict(ids, c.votes, alive(c.dead...))
		if commit != c.commit || done != c.done {
			t.Errorf("%s: commitVerdict = %v, %v; want %v, %v", c.name, commit, done, c.commit, c.done)
		}
	}
}

// TestLiveness finds a replica dead once its counter has not moved for
// the bound.
func TestLiveness(t *testing.T) {
	l := newLiveness(liveBound)
	t0 := time.Unix(1000, 0)
	l.observe("a", 5, t0)
	l.observe("a", 5, t0.Add(time.Second))
	if !l.alive("a", t0.Add(time.Second)) {
		t.Fatal("a dead 1s after its counter was first seen")
	}
	l.observe("a", 6, t0.Add(1500*time.Millisecond))
	if !l.alive("a", t0.Add(3*time.Second)) {
		t.Fatal("a dead 1.5s after its counter moved")
	}
	l.observe("a", 6, t0.Add(3500*time.Millisecond))
	if l.alive("a", t0.Add(3500*time.Millisecond)) {
		t.Fatal("a alive 2s after its counter last moved")
	}
}
