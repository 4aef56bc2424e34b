package rendezvous

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/testproc"
)

// fast is a Config for tests: quick polls and heartbeats; no last call
// unless a test sets one.
func fast(id string, minN, maxN int) Config {
	return Config{
		RunID: "t", NodeID: id, Addr: "127.0.0.1", MinNodes: minN, MaxNodes: maxN,
		LastCall: time.Hour, JoinTimeout: 10 * time.Second,
		HeartbeatInterval: 10 * time.Millisecond, DeadAfter: 100 * time.Millisecond, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func node(t *testing.T, b Backend, cfg Config) *Rendezvous {
	t.Helper()
	r, err := New(context.Background(), b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// nextAll runs Next on every node at once and returns their rounds.
func nextAll(t *testing.T, nodes ...*Rendezvous) []Round {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rounds := make([]Round, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { rounds[i], errs[i] = n.Next(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %s: Next: %v", nodes[i].NodeID(), err)
		}
	}
	return rounds
}

// checkGroup asserts that rounds are one group of n nodes with dense node
// ranks, each node at its own place in Members.
func checkGroup(t *testing.T, rounds []Round, number, n int) {
	t.Helper()
	var ranks []int
	for _, r := range rounds {
		if r.Number != number || r.NNodes() != n {
			t.Fatalf("round %d of %d nodes; want round %d of %d", r.Number, r.NNodes(), number, n)
		}
		if !slices.Equal(r.Members, rounds[0].Members) {
			t.Fatalf("nodes disagree on the members: %v and %v", r.Members, rounds[0].Members)
		}
		ranks = append(ranks, r.NodeRank)
	}
	slices.Sort(ranks)
	for i, r := range ranks {
		if r != i {
			t.Fatalf("node ranks %v; want 0..%d", ranks, n-1)
		}
	}
	for i, r := range rounds {
		if r.Members[r.NodeRank].Port == 0 || r.Members[r.NodeRank].Addr != "127.0.0.1" {
			t.Fatalf("node %d's member record %+v lacks its address", i, r.Members[r.NodeRank])
		}
	}
}

func TestRoundClosesAtMax(t *testing.T) {
	b := NewMemBackend()
	a, bb, c := node(t, b, fast("a", 2, 3)), node(t, b, fast("b", 2, 3)), node(t, b, fast("c", 2, 3))
	start := time.Now()
	checkGroup(t, nextAll(t, a, bb, c), 0, 3)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a full round took %v; it must close at MAX without the hour-long last call", d)
	}
}

func TestRoundClosesAtMinAfterLastCall(t *testing.T) {
	b := NewMemBackend()
	ca, cb := fast("a", 2, 4), fast("b", 2, 4)
	ca.LastCall, cb.LastCall = 300*time.Millisecond, 300*time.Millisecond
	start := time.Now()
	rounds := nextAll(t, node(t, b, ca), node(t, b, cb))
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("round closed after %v, before the last call of 300ms", d)
	}
	checkGroup(t, rounds, 0, 2)
}

func TestJoinTimeout(t *testing.T) {
	c := fast("a", 2, 2)
	c.JoinTimeout = 200 * time.Millisecond
	_, err := node(t, NewMemBackend(), c).Next(context.Background())
	if !errors.Is(err, ErrJoinTimeout) {
		t.Fatalf("Next alone with MIN 2: %v; want ErrJoinTimeout", err)
	}
}

// watchAll runs Watch on every node's round and returns their changes.
func watchAll(t *testing.T, nodes []*Rendezvous, rounds []Round) []Change {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]Change, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i], errs[i] = n.Watch(ctx, rounds[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %s: Watch: %v", nodes[i].NodeID(), err)
		}
	}
	return out
}

// A member whose heartbeat lapses ends the round as a failure; the
// others re-form without it, counting one failure.
func TestReformOnLeave(t *testing.T) {
	b := NewMemBackend()
	cfgs := []Config{fast("a", 2, 3), fast("b", 2, 3), fast("c", 2, 3)}
	var nodes []*Rendezvous
	for _, c := range cfgs {
		c.LastCall = 50 * time.Millisecond
		nodes = append(nodes, node(t, b, c))
	}
	rounds := nextAll(t, nodes...)
	checkGroup(t, rounds, 0, 3)
	b.Kill("c")
	for _, ch := range watchAll(t, nodes[:2], rounds[:2]) {
		if ch.Reason != Failure {
			t.Fatalf("change %+v; want a failure", ch)
		}
	}
	rounds = nextAll(t, nodes[:2]...)
	checkGroup(t, rounds, 1, 2)
	if rounds[0].Failures != 1 {
		t.Fatalf("failures %d after losing a node; want 1", rounds[0].Failures)
	}
}

// A node that arrives while the group is below MAX ends the round, not
// as a failure, and the new group has it.
func TestReformOnArrival(t *testing.T) {
	b := NewMemBackend()
	nodes := []*Rendezvous{node(t, b, fast("a", 2, 3)), node(t, b, fast("b", 2, 3))}
	for _, n := range nodes {
		n.cfg.LastCall = 50 * time.Millisecond
	}
	rounds := nextAll(t, nodes...)
	checkGroup(t, rounds, 0, 2)
	d := node(t, b, fast("d", 2, 3))
	var dRound Round
	var dErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		dRound, dErr = d.Next(context.Background())
	}()
	for _, ch := range watchAll(t, nodes, rounds) {
		if ch.Reason != Arrival {
			t.Fatalf("change %+v; want an arrival", ch)
		}
	}
	rounds = nextAll(t, nodes...)
	<-done
	if dErr != nil {
		t.Fatal(dErr)
	}
	rounds = append(rounds, dRound)
	checkGroup(t, rounds, 1, 3)
	if rounds[0].Failures != 0 {
		t.Fatalf("failures %d after an arrival; want 0", rounds[0].Failures)
	}
}

// A node that arrives while the group is full waits as a spare and does
// not disturb it; it joins the next round when one opens.
func TestSpareWaitsWhenFull(t *testing.T) {
	b := NewMemBackend()
	nodes := []*Rendezvous{node(t, b, fast("a", 1, 2)), node(t, b, fast("b", 1, 2))}
	rounds := nextAll(t, nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	spareDone := make(chan error, 1)
	go func() {
		_, err := node(t, b, fast("s", 1, 2)).Next(ctx)
		spareDone <- err
	}()
	if _, err := nodes[0].Watch(ctx, rounds[0]); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch with a spare waiting: %v; want no change until the deadline", err)
	}
	if err := <-spareDone; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the spare's Next: %v; want it waiting until the deadline", err)
	}
}

// Both nodes of a round report their workers failed: one failure counts.
func TestEndCountsOnce(t *testing.T) {
	b := NewMemBackend()
	nodes := []*Rendezvous{node(t, b, fast("a", 2, 2)), node(t, b, fast("b", 2, 2))}
	rounds := nextAll(t, nodes...)
	for i, n := range nodes {
		f, _, err := n.End(context.Background(), rounds[i], true)
		if err != nil || f != 1 {
			t.Fatalf("End: failures %d, %v; want 1", f, err)
		}
	}
	if rounds = nextAll(t, nodes...); rounds[0].Failures != 1 || rounds[0].Number != 1 {
		t.Fatalf("round %d with %d failures; want round 1 with 1", rounds[0].Number, rounds[0].Failures)
	}
}

// Once a node's workers finish, the job is complete: a late node exits.
func TestCompleteEndsTheJob(t *testing.T) {
	b := NewMemBackend()
	c := fast("a", 1, 2)
	c.LastCall = 10 * time.Millisecond
	a := node(t, b, c)
	rd, err := a.Next(context.Background())
	if err == nil {
		var ok bool
		ok, err = a.Complete(context.Background(), rd)
		if !ok {
			t.Fatal("Complete of the current round reported it superseded")
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node(t, b, fast("late", 1, 2)).Next(context.Background()); !errors.Is(err, ErrComplete) {
		t.Fatalf("Next after completion: %v; want ErrComplete", err)
	}
}

func TestLostBackendFailsWatch(t *testing.T) {
	b := NewMemBackend()
	a := node(t, b, fast("a", 1, 1))
	rd := nextAll(t, a)[0]
	b.Shutdown()
	if _, err := a.Watch(context.Background(), rd); !errors.Is(err, ErrBackendClosed) {
		t.Fatalf("Watch over a lost backend: %v; want its error", err)
	}
}

// The c10d store backend judges a node dead when its counter stops
// moving for deadAfter by the observer's clock.
func TestStoreBackendHeartbeats(t *testing.T) {
	ctx := context.Background()
	be, err := NewStoreBackend(ctx, store.NewMem(), "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sb := be.(*storeBackend)
	now := time.Unix(1000, 0)
	sb.now = func() time.Time { return now }
	alive := func() bool {
		m, err := sb.Alive(ctx, []string{"x"})
		if err != nil {
			t.Fatal(err)
		}
		return m["x"]
	}
	if err := sb.Beat(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if !alive() {
		t.Fatal("a node seen beating for the first time is dead")
	}
	now = now.Add(900 * time.Millisecond)
	sb.Beat(ctx, "x")
	if !alive() {
		t.Fatal("a beating node is dead")
	}
	now = now.Add(999 * time.Millisecond)
	if !alive() {
		t.Fatal("dead before deadAfter passed without a beat")
	}
	now = now.Add(2 * time.Millisecond)
	if alive() {
		t.Fatal("alive after deadAfter without a beat")
	}
	// And the state starts as an empty round that a swap changes.
	st, ver, err := sb.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := sb.Swap(ctx, ver, []byte(`{"round":1}`)); !ok || err != nil {
		t.Fatalf("swap at the current version: %v, %v", ok, err)
	}
	if ok, _ := sb.Swap(ctx, ver, []byte(`{"round":2}`)); ok {
		t.Fatalf("swap at a stale version (%s) succeeded", st)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{RunID: "x", MinNodes: 3, MaxNodes: 2}, "MIN is more than MAX"},
		{Config{RunID: "x", MinNodes: -1}, "at least 1"},
		{Config{MinNodes: 1}, "no run id"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v; want %q", c.cfg, err, c.want)
		}
	}
}

// Closing a round keeps the last round's members in their order (node
// rank 0 stays put) and puts newcomers after them, in join order.
func TestCloseKeepsPreviousRanks(t *testing.T) {
	m := func(id string) Member { return Member{ID: id} }
	s := State{Closed: true, Members: []Member{m("x"), m("y"), m("z")}}
	s = next(s, Failure, "z lost")
	s.Members = []Member{m("new"), m("y"), m("x")}
	s = closeRound(s)
	var got []string
	for _, mm := range s.Members {
		got = append(got, mm.ID)
	}
	if want := []string{"x", "y", "new"}; !slices.Equal(got, want) || !s.Closed {
		t.Fatalf("closed round's members %v (closed %v); want %v", got, s.Closed, want)
	}
}

// Two nodes on one machine given the same endpoint: the first serves
// the store, the second finds the port taken and connects; they meet in
// one round. The host, closing first, keeps serving until the other
// node has left.
func TestStoreEndpointHostAndClient(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := l.Addr().String()
	l.Close()
	var logs strings.Builder
	var mu sync.Mutex
	cfg := StoreConfig{Endpoint: ep, Token: []byte("secret"), RunID: "job", DeadAfter: time.Second, Linger: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{mu: &mu, w: &logs}, nil))}
	hostB, err := StoreEndpoint(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	clientB, err := StoreEndpoint(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	served := strings.Count(logs.String(), "serving the c10d rendezvous store")
	mu.Unlock()
	if served != 1 {
		t.Fatalf("%d nodes serve the store; want 1:\n%s", served, logs.String())
	}
	h, c := node(t, hostB, fast("h", 2, 2)), node(t, clientB, fast("c", 2, 2))
	checkGroup(t, nextAll(t, h, c), 0, 2)

	closed := make(chan time.Time, 1)
	go func() {
		h.Close()
		closed <- time.Now()
	}()
	// The host has said it left, and lingers.
	hostLeft := func() bool {
		n, err := clientB.(*storeBackend).s.Add(ctx, leftKey+"h", 0)
		return err == nil && n > 0
	}
	if !testproc.Poll(10*time.Second, hostLeft) {
		t.Fatal("the host did not say it left")
	}
	left := time.Now()
	if _, err := c.Complete(ctx, Round{Number: 0}); err != nil {
		t.Fatalf("the other node lost the store while the host was closing: %v", err)
	}
	c.Close()
	select {
	case at := <-closed:
		if at.Before(left) {
			t.Fatal("the host stopped serving before the other node left")
		}
	case <-time.After(4 * time.Second):
		t.Fatal("the host still serves 4s after the other node left")
	}
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
