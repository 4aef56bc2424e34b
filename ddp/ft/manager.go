package ft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/tensor"
)

// Config configures a Manager.
type Config struct {
	// ReplicaID names this replica; it stays the same when the replica
	// restarts. Members are ranked by it.
	ReplicaID string
	// Store is the coordination store, served by a process that is not a
	// replica (the launcher's node agent), and StoreAddr its host:port,
	// which each quorum's process group joins (as an agent store).
	Store     store.Store
	StoreAddr string
	// Group is the template of every quorum's process group: its Token,
	// TLS files, Timeout and Logger authenticate and bound the data plane
	// as for any group. InitMethod, Rank, WorldSize, AgentStore and
	// HeartbeatTimeout are set by the Manager; JobID ("" means
	// $GOTRAIN_RUN_ID or "default") is suffixed per quorum round.
	Group distributed.Config
	// Replicas is how many replicas the job starts with: the first quorum
	// waits for them, for at most JoinTimeout.
	Replicas int
	// MinReplicas is the smallest quorum that trains; 0 means 1. Below it
	// a round waits QuorumTimeout, then StartStep fails with the reason.
	MinReplicas int
	// Liveness is the liveness bound: a replica whose heartbeat has not
	// moved for this long is dropped from the next quorum, and a group
	// peer silent for this long fails the step. 0 means
	// Group.HeartbeatTimeout, else distributed.DefaultHeartbeatTimeout.
	Liveness time.Duration
	// JoinTimeout bounds the first quorum's wait for Replicas; 0 means
	// 4×Liveness.
	JoinTimeout time.Duration
	// QuorumTimeout bounds any round's wait for MinReplicas; 0 means
	// 10×Liveness.
	QuorumTimeout time.Duration
	// ModelHash identifies the model (ShapeHash of its parameters, and
	// whatever configuration must agree); replicas with another hash are
	// refused.
	ModelHash string
	// Step is the step this replica's state is at when it starts: 0 for
	// a fresh replica of a new job (all replicas initialised alike), a
	// checkpoint's step, or -1 for a replica that must heal from a peer.
	Step int64
	// Snapshot returns this replica's training state (model, optimizer,
	// scheduler, sampler, RNG: checkpoint.TrainingState's bytes), and
	// Load replaces it with a peer's. Both are called between steps.
	Snapshot func() ([]byte, error)
	Load     func([]byte) error
	// Logger receives quorum changes, heals and discarded steps; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Stats counts what the Manager survived.
type Stats struct {
	FailuresSurvived int             // quorum changes that dropped a member
	StepsLost        int             // steps discarded (not committed)
	Heals            int             // state transfers this replica served or received
	HealPause        []time.Duration // how long each transfer took
	History          []Record        // one record per quorum change
}

// Record is one quorum change.
type Record struct {
	QuorumID int64     `json:"quorum_id"`         // the quorum's ID
	Round    int64     `json:"round"`             // the round that formed it
	Step     int64     `json:"step"`              // the step it trained from
	Members  []string  `json:"members"`           // replica IDs in rank order
	Recover  []string  `json:"recover,omitempty"` // members healed on joining
	At       time.Time `json:"at"`                // when this replica adopted it
}

// Manager runs the per-step quorum of one replica: see the package doc.
// Its methods are called from the training loop's goroutine.
type Manager struct {
	cfg   Config
	st    store.Store
	log   *slog.Logger
	build string

	round  int64 // last round this replica took part in
	q      *Quorum
	g      *distributed.Group
	step   int64
	broken bool  // the group must be rebuilt before the next step
	err    error // the current step's failure
	cause  error // the last failure, the root cause of a quorum that cannot form

	mu    sync.Mutex
	stats Stats

	stop chan struct{}
	done chan struct{}
}

// pollInterval is how often a waiting round or vote reads the store.
const pollInterval = 20 * time.Millisecond

// New starts a replica's Manager: it checks cfg and starts the heartbeat.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	switch {
	case cfg.ReplicaID == "" || strings.ContainsAny(cfg.ReplicaID, "/, \t\n"):
		return nil, fmt.Errorf("ft: replica ID %q: want a non-empty name without '/', ',' or spaces", cfg.ReplicaID)
	case cfg.Store == nil || cfg.StoreAddr == "":
		return nil, errors.New("ft: Config.Store and Config.StoreAddr are required: the store that coordinates the replicas")
	case cfg.Snapshot == nil || cfg.Load == nil:
		return nil, errors.New("ft: Config.Snapshot and Config.Load are required: a replica heals from a peer's state")
	case cfg.Replicas < 1:
		return nil, fmt.Errorf("ft: Config.Replicas is %d: want the number of replicas the job starts with", cfg.Replicas)
	case cfg.Step < -1:
		return nil, fmt.Errorf("ft: Config.Step is %d: want -1 (heal from a peer) or the step of this replica's state", cfg.Step)
	}
	if cfg.MinReplicas <= 0 {
		cfg.MinReplicas = 1
	}
	if cfg.Liveness <= 0 {
		cfg.Liveness = cfg.Group.HeartbeatTimeout
		if cfg.Liveness <= 0 {
			cfg.Liveness = distributed.DefaultHeartbeatTimeout
		}
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = 4 * cfg.Liveness
	}
	if cfg.QuorumTimeout <= 0 {
		cfg.QuorumTimeout = 10 * cfg.Liveness
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b, err := distributed.LocalBuild()
	if err != nil {
		return nil, fmt.Errorf("ft: this program's build identity: %w", err)
	}
	job := cfg.Group.JobID
	if job == "" {
		job = "default"
	}
	m := &Manager{
		cfg:   cfg,
		st:    store.Prefix(cfg.Store, "gotrain-ft/"+job+"/"),
		log:   cfg.Logger.With("replica", cfg.ReplicaID),
		build: b.SHA256 + "/" + b.Version + "/" + strconv.Itoa(b.Protocol),
		step:  cfg.Step,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	if _, err := m.st.Add(ctx, "hb/"+cfg.ReplicaID, 1); err != nil {
		return nil, fmt.Errorf("ft: replica %s: first heartbeat: %w", cfg.ReplicaID, err)
	}
	go m.heartbeat()
	return m, nil
}

// heartbeat advances this replica's counter a few times per liveness
// bound until Close.
func (m *Manager) heartbeat() {
	defer close(m.done)
	t := time.NewTicker(m.cfg.Liveness / 5)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Liveness)
			if _, err := m.st.Add(ctx, "hb/"+m.cfg.ReplicaID, 1); err != nil {
				m.log.Warn("ft: heartbeat", "err", err)
			}
			cancel()
		}
	}
}

// Close stops the heartbeat and destroys the current group. It does not
// close Config.Store.
func (m *Manager) Close() error {
	select {
	case <-m.stop:
		return nil
	default:
	}
	close(m.stop)
	<-m.done
	if m.g != nil {
		err := m.g.Destroy()
		m.g = nil
		return err
	}
	return nil
}

// Step returns the number of steps committed: the step the replica's
// state is at.
func (m *Manager) Step() int64 { return m.step }

// SetStep sets the step this replica's state is at, for a caller whose
// quorum steps are not its training steps: DiLoCo or LocalSGD, which
// takes a quorum at each outer step, every H inner steps, and posts the
// inner step so that a joining replica heals to it. Call it between a
// ShouldCommit and the next StartStep; a replica that must heal (step
// -1) keeps its step until it has.
func (m *Manager) SetStep(step int64) {
	if m.step >= 0 {
		m.step = step
	}
}

// Quorum returns the current quorum (valid after StartStep).
func (m *Manager) Quorum() Quorum {
	if m.q == nil {
		return Quorum{}
	}
	return *m.q
}

// Rank returns this replica's index in the current quorum and Size the
// quorum's size: a sampler divides the step's data by them.
// Before the first StartStep they are -1 and 0.
func (m *Manager) Rank() int {
	if m.q == nil {
		return -1
	}
	return m.q.Index(m.cfg.ReplicaID)
}

// Size returns the number of replicas in the current quorum.
func (m *Manager) Size() int {
	if m.q == nil {
		return 0
	}
	return len(m.q.Members)
}

// Group returns the current quorum's process group, for collectives
// beyond AllReduce; a failure in them must be reported with Fail.
func (m *Manager) Group() *distributed.Group { return m.g }

// Stats returns a copy of the counters and the quorum history.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.HealPause = slices.Clone(s.HealPause)
	s.History = slices.Clone(s.History)
	return s
}

// Fail marks the current step as failed: it will not be committed. The
// group is destroyed at once, so that peers blocked on this replica fail
// instead of waiting for the liveness bound.
func (m *Manager) Fail(err error) {
	if m.err == nil {
		m.err = err
	}
	m.cause = err
	m.broken = true
	if m.g != nil {
		m.g.Destroy()
		m.g = nil
	}
}

// AllReduce averages buf over the quorum's replicas (sum, then divide by
// the quorum's size). A failure (a peer lost) is recorded: the step will
// not be committed; it is also returned, and the caller may go on to
// ShouldCommit.
func (m *Manager) AllReduce(ctx context.Context, buf []float32) error {
	if m.err != nil {
		return m.err
	}
	if m.g == nil {
		m.Fail(errors.New("ft: AllReduce before StartStep"))
		return m.err
	}
	if err := m.g.AllReduce(ctx, buf, distributed.Sum); err != nil {
		m.Fail(fmt.Errorf("ft: replica %s: allreduce in quorum %d: %w", m.cfg.ReplicaID, m.q.ID, err))
		return m.err
	}
	inv := 1 / float32(len(m.q.Members))
	for i := range buf {
		buf[i] *= inv
	}
	return nil
}

// AllReduceGrads averages the gradients of params over the quorum in one
// flat buffer. Parameters without a gradient contribute zeros.
func (m *Manager) AllReduceGrads(ctx context.Context, params []*tensor.Tensor) error {
	n := 0
	for _, p := range params {
		n += len(p.Data())
	}
	flat := make([]float32, 0, n)
	for _, p := range params {
		if g := p.Grad(); g != nil {
			flat = append(flat, g.Data()...)
		} else {
			flat = append(flat, make([]float32, len(p.Data()))...)
		}
	}
	if err := m.AllReduce(ctx, flat); err != nil {
		return err
	}
	off := 0
	for _, p := range params {
		k := len(p.Data())
		if g := p.Grad(); g != nil {
			copy(g.Data(), flat[off:off+k])
		}
		off += k
	}
	return nil
}

// ShouldCommit reports whether every member of the quorum completed the
// step. Every member gets the same answer: each posts its vote, and the
// first to find the outcome (all voted to commit; one voted to discard or
// died without voting) records it for all. On false the caller discards
// the step (zeroes the gradients, does not step the optimizer); on true
// it steps the optimizer and the step count advances.
func (m *Manager) ShouldCommit(ctx context.Context) (bool, error) {
	if m.q == nil {
		return false, errors.New("ft: ShouldCommit before StartStep")
	}
	base := fmt.Sprintf("r/%d/", m.q.Round)
	vote := []byte("1")
	if m.err != nil {
		vote = []byte("0")
	}
	if err := m.st.Set(ctx, base+"v/"+m.cfg.ReplicaID, vote); err != nil {
		return false, fmt.Errorf("ft: replica %s: post the vote of step %d: %w", m.cfg.ReplicaID, m.step, err)
	}
	live := newLiveness(m.cfg.Liveness)
	ids := m.q.IDs()
	next := fmt.Sprintf("r/%d/ids", m.q.Round+1)
	var outcome []byte
	for {
		v, err := peek(ctx, m.st, base+"c")
		if err != nil {
			return false, fmt.Errorf("ft: replica %s: read the outcome of step %d: %w", m.cfg.ReplicaID, m.step, err)
		}
		if v != nil {
			outcome = v
			break
		}
		// A member restarted in place keeps its ID and heartbeat but posts
		// to the next round without voting in this one: it is gone.
		later, err := peek(ctx, m.st, next)
		if err != nil {
			return false, err
		}
		restarted := func(id string) bool { return strings.Contains(","+string(later), ","+id+",") }
		votes := map[string]bool{}
		now := time.Now()
		for _, id := range ids {
			if err := m.observe(ctx, live, id, now); err != nil {
				return false, err
			}
			if b, err := peek(ctx, m.st, base+"v/"+id); err != nil {
				return false, err
			} else if b != nil {
				votes[id] = string(b) == "1"
			}
		}
		if commit, done := commitVerdict(ids, votes, func(id string) bool { return live.alive(id, now) && !restarted(id) }); done {
			want := []byte("0")
			if commit {
				want = []byte("1")
			}
			if outcome, err = m.st.CompareAndSet(ctx, base+"c", nil, want); err != nil {
				return false, fmt.Errorf("ft: replica %s: record the outcome of step %d: %w", m.cfg.ReplicaID, m.step, err)
			}
			break
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return false, err
		}
	}
	commit := string(outcome) == "1"
	if commit {
		m.step++
	} else {
		m.mu.Lock()
		m.stats.StepsLost++
		m.mu.Unlock()
		m.broken = true
		m.log.Warn("ft: step discarded: a member failed", "step", m.step, "quorum", m.q.ID, "err", m.err)
		if m.g != nil {
			m.g.Destroy()
			m.g = nil
		}
	}
	m.err = nil
	return commit, nil
}

// observe reads id's heartbeat counter into live.
func (m *Manager) observe(ctx context.Context, live *liveness, id string, now time.Time) error {
	n, err := m.st.Add(ctx, "hb/"+id, 0)
	if err != nil {
		return fmt.Errorf("ft: replica %s: read the heartbeat of %s: %w", m.cfg.ReplicaID, id, err)
	}
	live.observe(id, n, now)
	return nil
}

// StartStep runs this step's quorum round: it posts this replica, waits
// for the quorum, rebuilds the process group if the membership changed
// or the last step failed, and heals the members that are behind. It
// fails when no quorum of MinReplicas forms within QuorumTimeout (naming
// the last failure, the root cause), or when this replica is refused.
func (m *Manager) StartStep(ctx context.Context) error {
	start := time.Now()
	for {
		if m.round == 0 {
			// A replica (re)starting joins the round after the last one
			// formed.
			n, err := peekInt(ctx, m.st, "latest")
			if err != nil {
				return err
			}
			m.round = n
		}
		round := m.round + 1
		q, err := m.runRound(ctx, round)
		if err != nil {
			if m.cause != nil {
				return fmt.Errorf("ft: replica %s: %w; the last failure: %w", m.cfg.ReplicaID, err, m.cause)
			}
			return fmt.Errorf("ft: replica %s: %w", m.cfg.ReplicaID, err)
		}
		m.round = round
		if why, ok := q.Refused[m.cfg.ReplicaID]; ok {
			return fmt.Errorf("ft: replica %s refused by quorum round %d: %s", m.cfg.ReplicaID, round, why)
		}
		if q.Index(m.cfg.ReplicaID) < 0 {
			continue // posted after the round formed: the next one takes it
		}
		if err := m.adopt(ctx, &q); err != nil {
			m.Fail(err)
			if time.Since(start) > m.cfg.QuorumTimeout {
				return fmt.Errorf("ft: replica %s: no working group within %v: %w", m.cfg.ReplicaID, m.cfg.QuorumTimeout, err)
			}
			m.log.Warn("ft: quorum round failed; the next round retries", "round", round, "err", err)
			m.err = nil
			continue
		}
		return nil
	}
}

// runRound posts this replica to round and returns the round's quorum.
func (m *Manager) runRound(ctx context.Context, round int64) (Quorum, error) {
	base := fmt.Sprintf("r/%d/", round)
	me := Member{ID: m.cfg.ReplicaID, Step: m.step, Hash: m.cfg.ModelHash, Build: m.build}
	b, _ := json.Marshal(me)
	if err := m.st.Set(ctx, base+"m/"+me.ID, b); err != nil {
		return Quorum{}, fmt.Errorf("post to quorum round %d: %w", round, err)
	}
	if err := appendID(ctx, m.st, base+"ids", me.ID); err != nil {
		return Quorum{}, fmt.Errorf("post to quorum round %d: %w", round, err)
	}
	var prev *Quorum
	if round > 1 {
		v, err := peek(ctx, m.st, fmt.Sprintf("r/%d/q", round-1))
		if err != nil {
			return Quorum{}, err
		}
		if v != nil {
			prev = new(Quorum)
			if err := json.Unmarshal(v, prev); err != nil {
				return Quorum{}, fmt.Errorf("quorum round %d: decode: %w", round-1, err)
			}
		}
	}
	live := newLiveness(m.cfg.Liveness)
	start := time.Now()
	cache := map[string]Member{}
	logged := false
	for {
		if v, err := peek(ctx, m.st, base+"q"); err != nil {
			return Quorum{}, err
		} else if v != nil {
			var q Quorum
			if err := json.Unmarshal(v, &q); err != nil {
				return Quorum{}, fmt.Errorf("quorum round %d: decode: %w", round, err)
			}
			return q, nil
		}
		if latest, err := peekInt(ctx, m.st, "latest"); err != nil {
			return Quorum{}, err
		} else if latest >= round {
			// Formed since the look above, or formed and collected: then
			// this replica was too late for it.
			v, err := peek(ctx, m.st, base+"q")
			if err != nil || v == nil {
				return Quorum{Round: round}, err
			}
			var q Quorum
			if err := json.Unmarshal(v, &q); err != nil {
				return Quorum{}, fmt.Errorf("quorum round %d: decode: %w", round, err)
			}
			return q, nil
		}
		idv, err := peek(ctx, m.st, base+"ids")
		if err != nil {
			return Quorum{}, err
		}
		var posted []Member
		for _, id := range strings.Split(strings.Trim(string(idv), ","), ",") {
			if id == "" {
				continue
			}
			pm, ok := cache[id]
			if !ok {
				v, err := m.st.Get(ctx, base+"m/"+id) // set before the ID was listed
				if err != nil {
					return Quorum{}, fmt.Errorf("quorum round %d: read member %s: %w", round, id, err)
				}
				if err := json.Unmarshal(v, &pm); err != nil {
					return Quorum{}, fmt.Errorf("quorum round %d: decode member %s: %w", round, id, err)
				}
				cache[id] = pm
			}
			posted = append(posted, pm)
		}
		now := time.Now()
		if prev != nil {
			for _, pm := range prev.Members {
				if err := m.observe(ctx, live, pm.ID, now); err != nil {
					return Quorum{}, err
				}
			}
		}
		q, done, err := decide(roundInput{
			Round: round, Prev: prev, Posted: posted,
			Alive:  func(id string) bool { return live.alive(id, now) },
			Waited: now.Sub(start), Replicas: m.cfg.Replicas, MinReplicas: m.cfg.MinReplicas,
			JoinTimeout: m.cfg.JoinTimeout, QuorumTimeout: m.cfg.QuorumTimeout,
		})
		if err != nil {
			return Quorum{}, err
		}
		if done {
			enc, _ := json.Marshal(q)
			stored, err := m.st.CompareAndSet(ctx, base+"q", nil, enc)
			if err != nil {
				return Quorum{}, fmt.Errorf("quorum round %d: record: %w", round, err)
			}
			if err := m.st.Set(ctx, "latest", []byte(strconv.FormatInt(round, 10))); err != nil {
				return Quorum{}, fmt.Errorf("quorum round %d: record: %w", round, err)
			}
			var got Quorum
			if err := json.Unmarshal(stored, &got); err != nil {
				return Quorum{}, fmt.Errorf("quorum round %d: decode: %w", round, err)
			}
			if string(stored) == string(enc) {
				m.collect(ctx, round-2)
			}
			return got, nil
		}
		if !logged && now.Sub(start) > m.cfg.Liveness {
			m.log.Info("ft: quorum round waiting", "round", round, "posted", names(posted), "min_replicas", m.cfg.MinReplicas)
			logged = true
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return Quorum{}, fmt.Errorf("quorum round %d: %w", round, err)
		}
	}
}

// collect deletes the keys of a round that no replica reads any more:
// every member of the round after it has posted to the one just formed.
// A replica that comes later finds "latest" past its round and moves on.
func (m *Manager) collect(ctx context.Context, round int64) {
	if round < 1 {
		return
	}
	base := fmt.Sprintf("r/%d/", round)
	ids, err := peek(ctx, m.st, base+"ids")
	if err != nil {
		return
	}
	keys := []string{base + "ids", base + "q", base + "c"}
	for _, id := range strings.Split(strings.Trim(string(ids), ","), ",") {
		if id != "" {
			keys = append(keys, base+"m/"+id, base+"v/"+id)
		}
	}
	for _, k := range keys {
		if _, err := m.st.Delete(ctx, k); err != nil {
			m.log.Warn("ft: delete an old round's key", "key", k, "err", err)
			return
		}
	}
}

// adopt makes q the current quorum: a new group if needed, then healing.
func (m *Manager) adopt(ctx context.Context, q *Quorum) error {
	changed := m.q == nil || q.ID != m.q.ID
	// A member that heals is a new process even when the membership is
	// the same (restarted in place before the quorum dropped it): the
	// old group holds its predecessor.
	if changed || m.broken || m.g == nil || len(q.Recover) > 0 {
		if m.g != nil {
			m.g.Destroy()
			m.g = nil
		}
		gc := m.cfg.Group
		gc.InitMethod = "tcp://" + m.cfg.StoreAddr
		gc.AgentStore = true
		gc.Rank, gc.WorldSize = q.Index(m.cfg.ReplicaID), len(q.Members)
		if gc.JobID == "" {
			gc.JobID = "default"
		}
		gc.JobID = fmt.Sprintf("%s-ft-%d", gc.JobID, q.Round)
		gc.HeartbeatTimeout = m.cfg.Liveness
		if gc.ConnectTimeout == 0 || gc.ConnectTimeout > 2*m.cfg.Liveness {
			// A member that died after posting must not hold the others
			// for a minute.
			gc.ConnectTimeout = 2 * m.cfg.Liveness
		}
		g, err := distributed.Init(ctx, gc)
		if err != nil {
			return fmt.Errorf("quorum %d (round %d, members %s): build the group: %w", q.ID, q.Round, strings.Join(q.IDs(), ", "), err)
		}
		m.g = g
		m.broken = false
	}
	if changed {
		dropped := m.q != nil && slices.ContainsFunc(m.q.Members, func(pm Member) bool { return q.Index(pm.ID) < 0 })
		m.mu.Lock()
		if dropped {
			m.stats.FailuresSurvived++
		}
		m.stats.History = append(m.stats.History, Record{QuorumID: q.ID, Round: q.Round, Step: q.MaxStep, Members: q.IDs(), Recover: q.Recover, At: time.Now()})
		m.mu.Unlock()
		m.log.Info("ft: new quorum", "quorum", q.ID, "round", q.Round, "step", q.MaxStep, "members", strings.Join(q.IDs(), ","), "recover", strings.Join(q.Recover, ","))
	}
	m.q = q
	if len(q.Recover) > 0 {
		if err := m.heal(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// peek returns key's value, or nil if it is not set, without waiting.
// Values this package stores are never empty.
func peek(ctx context.Context, st store.Store, key string) ([]byte, error) {
	v, err := st.CompareAndSet(ctx, key, []byte{0}, []byte{0})
	if err != nil {
		return nil, fmt.Errorf("ft: read %s: %w", key, err)
	}
	if len(v) == 0 {
		return nil, nil
	}
	return v, nil
}

func peekInt(ctx context.Context, st store.Store, key string) (int64, error) {
	v, err := peek(ctx, st, key)
	if err != nil || v == nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ft: %s holds %q, not a number", key, v)
	}
	return n, nil
}

// appendID adds id to the comma-separated list under key, atomically.
func appendID(ctx context.Context, st store.Store, key, id string) error {
	old, err := peek(ctx, st, key)
	if err != nil {
		return err
	}
	for {
		want := append(append(slices.Clone(old), id...), ',')
		got, err := st.CompareAndSet(ctx, key, old, want)
		if err != nil {
			return err
		}
		if string(got) == string(want) {
			return nil
		}
		old = got
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
