package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/gotrain/gotrain/launch/internal/freeport"
)

// Defaults of the zero Config fields, torchrun's where torchrun has them
// (last_call_timeout 30 s, join_timeout 600 s); heartbeats are faster
// than torchrun's 5 s × 3, so that a dead node is noticed in 5 s.
const (
	DefaultLastCall          = 30 * time.Second
	DefaultJoinTimeout       = 600 * time.Second
	DefaultHeartbeatInterval = time.Second
	DefaultDeadAfter         = 5 * time.Second
	DefaultPollInterval      = 200 * time.Millisecond
)

// Sentinel errors.
var (
	// ErrComplete means the job finished: a node's workers of its last
	// round all succeeded, so a node joining now has nothing to do.
	ErrComplete = errors.New("rendezvous: job already complete")
	// ErrJoinTimeout means fewer than MinNodes nodes joined within
	// JoinTimeout.
	ErrJoinTimeout = errors.New("rendezvous: join timeout")
	// ErrFailed means a node marked the job failed (Fail): its group
	// used up its restarts.
	ErrFailed = errors.New("rendezvous: the job failed")
)

// Config is one node's view of an elastic job's rendezvous.
type Config struct {
	// RunID names the job (torchrun --rdzv-id); nodes with the same id
	// meet. Backends keep its keys under /gotrain/<RunID>/.
	RunID string
	// MinNodes and MaxNodes bound the group (torchrun --nnodes MIN:MAX);
	// 0 means 1 and MinNodes.
	MinNodes, MaxNodes int
	// NodeID is this node's unique name; "" means host-pid-random.
	NodeID string
	// Addr is this node's address as the others reach it: where its
	// rank-0 worker serves the job's store when it has node rank 0.
	Addr string
	// NProc is this node's worker count (0 means 1); every node of a
	// round must have the same.
	NProc int
	// LastCall is how long a round with at least MinNodes (and fewer
	// than MaxNodes) stays open for more nodes (0: DefaultLastCall).
	LastCall time.Duration
	// JoinTimeout bounds the wait for MinNodes nodes (0:
	// DefaultJoinTimeout); a spare node, waiting while the group is full,
	// waits without bound.
	JoinTimeout time.Duration
	// HeartbeatInterval is how often the node renews its liveness, and
	// DeadAfter how long a node may go without before the others count
	// it dead (0: the defaults).
	HeartbeatInterval, DeadAfter time.Duration
	// PollInterval is how often a waiting or watching node reads the
	// state (0: DefaultPollInterval).
	PollInterval time.Duration
	// Logger receives the node's rendezvous records; nil means
	// slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.MinNodes = max(c.MinNodes, 1)
	if c.MaxNodes == 0 {
		c.MaxNodes = c.MinNodes
	}
	c.NProc = max(c.NProc, 1)
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LastCall, DefaultLastCall)
	def(&c.JoinTimeout, DefaultJoinTimeout)
	def(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&c.DeadAfter, DefaultDeadAfter)
	def(&c.PollInterval, DefaultPollInterval)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.NodeID == "" {
		host, _ := osHostname()
		c.NodeID = host + "-" + strconv.Itoa(osGetpid()) + "-" + randomSuffix()
	}
	return c
}

// Validate says what is wrong with c, as an error naming the field.
func (c Config) Validate() error {
	switch {
	case c.MinNodes < 0 || c.MaxNodes < 0:
		return fmt.Errorf("rendezvous: nnodes %d:%d: must be at least 1", c.MinNodes, c.MaxNodes)
	case c.MaxNodes != 0 && c.MinNodes > c.MaxNodes:
		return fmt.Errorf("rendezvous: nnodes %d:%d: MIN is more than MAX", c.MinNodes, c.MaxNodes)
	case c.RunID == "":
		return errors.New("rendezvous: no run id")
	case c.LastCall < 0 || c.JoinTimeout < 0 || c.HeartbeatInterval < 0 || c.DeadAfter < 0 || c.PollInterval < 0:
		return errors.New("rendezvous: negative duration")
	}
	return nil
}

// Round is a closed round as one node sees it: the group its workers
// run in.
type Round struct {
	// Number is the round's index, counting every re-form from 0.
	Number int
	// NodeRank is this node's place in Members.
	NodeRank int
	// Members are the nodes of the group by node rank.
	Members []Member
	// Failures is the number of rounds that ended by failure before this
	// one: the workers' restart count.
	Failures int
	// Why says why the previous round ended ("" for the first).
	Why string
}

// NNodes is the number of nodes in the round.
func (r Round) NNodes() int { return len(r.Members) }

// Master is node rank 0's address and port, where the round's rank-0
// worker serves the job's store.
func (r Round) Master() (string, int) { return r.Members[0].Addr, r.Members[0].Port }

// Change is why a running round ended.
type Change struct {
	Reason Reason
	Why    string
}

// Rendezvous is one node's membership in an elastic job. Its methods are
// called from one goroutine (the launcher's loop), except that Watch
// runs beside the workers while the loop waits for them.
type Rendezvous struct {
	cfg  Config
	b    Backend
	log  *slog.Logger
	stop context.CancelFunc
	wg   sync.WaitGroup // the heartbeat goroutine
}

// New starts node cfg.NodeID's membership over b: it begins to beat at
// once, so the others never see it join without a heartbeat. Close ends
// it (and closes b).
func New(ctx context.Context, b Backend, cfg Config) (*Rendezvous, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := b.Beat(ctx, cfg.NodeID); err != nil {
		return nil, fmt.Errorf("rendezvous: first heartbeat: %w", err)
	}
	hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r := &Rendezvous{cfg: cfg, b: b, log: cfg.Logger, stop: stop}
	r.wg.Add(1)
	go r.beat(hctx)
	return r, nil
}

// NodeID is this node's id.
func (r *Rendezvous) NodeID() string { return r.cfg.NodeID }

// MaxNodes is the most nodes a round may have.
func (r *Rendezvous) MaxNodes() int { return r.cfg.MaxNodes }

func (r *Rendezvous) beat(ctx context.Context) {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, r.cfg.DeadAfter)
		err := r.b.Beat(bctx, r.cfg.NodeID)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			r.log.Warn("rendezvous: heartbeat failed; the other nodes will count this node dead if it goes on", "node", r.cfg.NodeID, "err", err)
			failing = true
		case err == nil && failing:
			r.log.Info("rendezvous: heartbeat works again", "node", r.cfg.NodeID)
			failing = false
		}
	}
}

// Close stops the heartbeats and closes the backend.
func (r *Rendezvous) Close() error {
	r.stop()
	r.wg.Wait()
	return r.b.Close()
}

// load reads and decodes the state.
func (r *Rendezvous) load(ctx context.Context) (State, string, error) {
	b, ver, err := r.b.Load(ctx)
	if err != nil {
		return State{}, "", fmt.Errorf("rendezvous %s: reading the state: %w", r.cfg.RunID, err)
	}
	s, err := decode(b)
	return s, ver, err
}

// swap writes s over version; false if another node wrote first.
func (r *Rendezvous) swap(ctx context.Context, ver string, s State) (bool, error) {
	s.Seq++
	ok, err := r.b.Swap(ctx, ver, encode(s))
	if err != nil {
		return false, fmt.Errorf("rendezvous %s: writing the state: %w", r.cfg.RunID, err)
	}
	return ok, nil
}

// alive asks the backend which of s's nodes beat; this node always does.
func (r *Rendezvous) alive(ctx context.Context, s State) (func(string) bool, error) {
	ids := s.ids()
	if len(ids) == 0 {
		return func(string) bool { return true }, nil
	}
	m, err := r.b.Alive(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("rendezvous %s: reading heartbeats: %w", r.cfg.RunID, err)
	}
	return func(id string) bool { return id == r.cfg.NodeID || m[id] }, nil
}

// sleep waits one poll interval; false if ctx ended.
func (r *Rendezvous) sleep(ctx context.Context) bool {
	t := time.NewTimer(r.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Next joins the next round and returns it once it closes: at MaxNodes
// nodes, or LastCall after it has MinNodes. It ends a closed round that
// must re-form (a member dead, or this node arriving while the group is
// below MaxNodes). It fails with ErrComplete when the job is done, with
// ErrJoinTimeout when MinNodes do not come within JoinTimeout, or with
// the backend's error.
func (r *Rendezvous) Next(ctx context.Context) (Round, error) {
	c := r.cfg
	// The port of the round's store, should this node get node rank 0.
	port, err := freeport.Pick(c.Addr)
	if err != nil {
		return Round{}, fmt.Errorf("rendezvous: this node's address: %w", err)
	}
	me := Member{ID: c.NodeID, Addr: c.Addr, Port: port, NProc: c.NProc}
	start := time.Now()
	lastCall := lastCallTimer{}
	spare := false
	for {
		s, ver, err := r.load(ctx)
		if err != nil {
			return Round{}, err
		}
		// A member of the closed round runs it, even if a quicker member
		// has already completed it.
		if i := s.index(me.ID); s.Closed && i >= 0 && !s.Failed {
			return r.round(s, i)
		}
		switch {
		case s.Failed:
			return Round{}, ErrFailed
		case s.Complete:
			return Round{}, ErrComplete
		}
		alive, err := r.alive(ctx, s)
		if err != nil {
			return Round{}, err
		}
		ns, changed := join(s, me, alive, c.MaxNodes)
		if !ns.Closed && lastCall.due(ns, time.Now(), c.MinNodes, c.LastCall) {
			ns, changed = closeRound(ns), true
		}
		if changed {
			ok, err := r.swap(ctx, ver, ns)
			if err != nil {
				return Round{}, err
			}
			if !ok {
				continue // another node wrote first: decide again on its state
			}
			if ns.Closed && !s.Closed || ns.Round != s.Round {
				r.log.Debug("rendezvous: state changed", "round", ns.Round, "closed", ns.Closed, "members", len(ns.Members))
			}
			s = ns
		}
		if i := s.index(me.ID); s.Closed && i >= 0 {
			return r.round(s, i)
		}
		switch {
		case s.Closed && len(s.Members) >= c.MaxNodes:
			if !spare {
				r.log.Info("rendezvous: the group is full; waiting as a spare node", "round", s.Round, "max_nodes", c.MaxNodes)
				spare = true
			}
		case time.Since(start) > c.JoinTimeout:
			return Round{}, fmt.Errorf("%w: rendezvous %s: %d of at least %d nodes joined within %v",
				ErrJoinTimeout, c.RunID, len(s.Members), c.MinNodes, c.JoinTimeout)
		}
		if !r.sleep(ctx) {
			return Round{}, fmt.Errorf("rendezvous %s: waiting for the round to close: %w", c.RunID, context.Cause(ctx))
		}
	}
}

// round is s as node rank i sees it.
func (r *Rendezvous) round(s State, i int) (Round, error) {
	for _, m := range s.Members {
		if m.NProc != r.cfg.NProc {
			return Round{}, fmt.Errorf("rendezvous %s: node %s has %d workers and this node %d; every node needs the same --nproc-per-node",
				r.cfg.RunID, m.ID, m.NProc, r.cfg.NProc)
		}
	}
	return Round{Number: s.Round, NodeRank: i, Members: s.Members, Failures: s.Failures, Why: s.Why}, nil
}

// lastCallTimer runs a node's own last call: it starts when the node
// sees round n open with MinNodes, so it needs no clock shared by the
// nodes.
type lastCallTimer struct {
	round int
	since time.Time
}

// due reports whether s (open) has had at least min members for d.
func (t *lastCallTimer) due(s State, now time.Time, min int, d time.Duration) bool {
	if len(s.Members) < min {
		t.since = time.Time{}
		return false
	}
	if t.since.IsZero() || t.round != s.Round {
		t.round, t.since = s.Round, now
	}
	return now.Sub(t.since) >= d
}

// Watch watches round rd while its workers run and returns when the
// group must re-form: another node ended the round, a member's heartbeat
// lapsed (Failure; Watch ends the round), or a node waits to join while
// the group is below MaxNodes (Arrival; Watch ends the round). After the
// job completes it only waits for ctx. It returns an error if the
// backend fails, or ctx's cause.
func (r *Rendezvous) Watch(ctx context.Context, rd Round) (Change, error) {
	for {
		if !r.sleep(ctx) {
			return Change{}, context.Cause(ctx)
		}
		s, ver, err := r.load(ctx)
		if err != nil {
			return Change{}, err
		}
		if s.Round != rd.Number || s.Failed {
			return Change{Reason: s.Ended, Why: s.Why}, nil
		}
		if s.Complete {
			continue
		}
		alive, err := r.alive(ctx, s)
		if err != nil {
			return Change{}, err
		}
		reason, why := assess(s, alive, r.cfg.MaxNodes)
		if reason == NoChange {
			continue
		}
		ok, err := r.swap(ctx, ver, next(s, reason, why))
		if err != nil {
			return Change{}, err
		}
		if ok {
			r.log.Info("rendezvous: re-forming the group", "round", rd.Number, "reason", reason.String(), "why", why)
			return Change{Reason: reason, Why: why}, nil
		}
	}
}

// End ends round rd because failed (this node's workers failed) or not,
// unless another node has already ended it, and returns the group's
// failure count after it; complete reports that another node's workers
// had finished the job meanwhile (nothing is ended then).
func (r *Rendezvous) End(ctx context.Context, rd Round, failed bool) (failures int, complete bool, err error) {
	reason, why := Arrival, "node "+r.cfg.NodeID+" left"
	if failed {
		reason, why = Failure, "a worker on node "+r.cfg.NodeID+" failed"
	}
	for {
		s, ver, err := r.load(ctx)
		if err != nil {
			return 0, false, err
		}
		if s.Round != rd.Number || s.Complete || s.Failed {
			return s.Failures, s.Complete, nil
		}
		ns := next(s, reason, why)
		ok, err := r.swap(ctx, ver, ns)
		if err != nil {
			return 0, false, err
		}
		if ok {
			return ns.Failures, false, nil
		}
	}
}

// Fail marks the job failed, so that every node stops: this node's
// workers failed and the group has no restart left.
func (r *Rendezvous) Fail(ctx context.Context) error {
	for {
		s, ver, err := r.load(ctx)
		if err != nil || s.Failed {
			return err
		}
		s.Failed = true
		ok, err := r.swap(ctx, ver, s)
		if err != nil || ok {
			return err
		}
	}
}

// Complete marks the job done after this node's workers of round rd all
// succeeded. It reports false if the round had already ended (a node
// arrived or failed meanwhile): then the node joins the next round, whose
// workers resume from the last checkpoint.
func (r *Rendezvous) Complete(ctx context.Context, rd Round) (bool, error) {
	for {
		s, ver, err := r.load(ctx)
		if err != nil {
			return false, err
		}
		if s.Complete {
			return true, nil
		}
		if s.Round != rd.Number {
			return false, nil
		}
		s.Complete = true
		ok, err := r.swap(ctx, ver, s)
		if err != nil || ok {
			return ok, err
		}
	}
}
