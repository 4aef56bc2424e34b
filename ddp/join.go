package ddp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/tensor"
)

// ErrUnevenInputs is wrapped by the error every rank gets from Join with
// ThrowOnEarlyTermination when some rank runs out of inputs before the
// others.
var ErrUnevenInputs = errors.New("ddp: join: uneven inputs")

// JoinConfig is the configuration of one Join, which every Joinable's
// JoinHook sees.
type JoinConfig struct {
	// DivideByInitialWorldSize divides the summed gradients by the world
	// size the group started with, so every sample weighs the same in the
	// gradient (PyTorch's default). When false, they are divided by the
	// number of ranks that still have inputs, as if training on a smaller
	// world.
	DivideByInitialWorldSize bool
	// ThrowOnEarlyTermination makes every rank fail with ErrUnevenInputs,
	// at the same forward pass, as soon as one rank runs out of inputs,
	// instead of shadowing the others' collectives.
	ThrowOnEarlyTermination bool
}

// JoinOption configures Join.
type JoinOption func(*JoinConfig)

// DivideByInitialWorldSize sets JoinConfig.DivideByInitialWorldSize
// (default true, as in PyTorch).
func DivideByInitialWorldSize(on bool) JoinOption {
	return func(c *JoinConfig) { c.DivideByInitialWorldSize = on }
}

// ThrowOnEarlyTermination sets JoinConfig.ThrowOnEarlyTermination
// (default false).
func ThrowOnEarlyTermination(on bool) JoinOption {
	return func(c *JoinConfig) { c.ThrowOnEarlyTermination = on }
}

// JoinRound is what one round of Join's bookkeeping collective tells every
// rank: a round is one forward pass of the ranks still training, matched
// by one shadow iteration on the ranks that ran out of inputs.
type JoinRound struct {
	// Step counts the rounds of this Join, from 1.
	Step int
	// Active[r] reports whether rank r still had inputs in this round.
	Active []bool
	// Count is the number of active ranks.
	Count int
	// Shadow is the number of active ranks that announced collectives
	// after the notification (DDP: a gradient reduction in the coming
	// backward pass, false inside NoSync).
	Shadow int
	// Root is the highest active rank: the copy the others take in
	// broadcasts, since a joined rank's state is stale. -1 if none.
	Root int
}

// Joinable is a component with per-iteration collectives that the ranks
// whose inputs ended early must shadow: *Model, and sharded strategies
// (optimizer or parameter sharding) as they come. A Joinable calls
// Joiner.Notify at the start of each iteration's collectives (DDP: in
// Forward) while a Join runs.
type Joinable interface {
	// JoinHook attaches the joinable to j for the duration of j's Join
	// and returns the hook that shadows its collectives.
	JoinHook(j *Joiner) JoinHook
	// JoinGroup is the group its collectives run on; all joinables of a
	// Join must share it.
	JoinGroup() Group
}

// JoinHook runs on a rank whose inputs have ended.
type JoinHook interface {
	// MainHook issues the collectives the active ranks issue in round r
	// after their notification, with neutral inputs (DDP: zero
	// gradients).
	MainHook(ctx context.Context, r JoinRound) error
	// PostHook runs once every rank has joined. root is the rank whose
	// state is authoritative (the highest of the last ranks to join);
	// lastJoiner reports whether this rank is one of those.
	PostHook(ctx context.Context, lastJoiner bool, root int) error
}

// Joiner is the state of one Join on one rank, shared by its joinables.
type Joiner struct {
	cfg    JoinConfig
	group  Group
	first  Joinable
	inside bool // Join is running (f or the shadow loop)
	rounds int
	round  JoinRound // the latest round
	last   int       // Root of the latest round with an active rank
	failed error     // the uneven-input failure, with ThrowOnEarlyTermination
	ctrl   []float32
}

// Config returns the configuration of the Join.
func (j *Joiner) Config() JoinConfig { return j.cfg }

// Running reports whether the Join is still running (its f or the shadow
// loop), so that a joinable can tell a Join it was attached to has ended.
func (j *Joiner) Running() bool { return j != nil && j.inside }

// Notify tells the ranks that joined that this rank is still training and
// whether collectives follow (shadow). Only the first joinable of the
// Join communicates; the others get the round it started. With
// ThrowOnEarlyTermination it returns the ErrUnevenInputs failure once a
// rank has run out of inputs, and from then on issues no collective.
func (j *Joiner) Notify(ctx context.Context, who Joinable, shadow bool) (JoinRound, error) {
	if !j.inside {
		return JoinRound{}, errors.New("ddp: join: Notify called after its Join returned")
	}
	if j.failed != nil || who != j.first {
		return j.round, j.failed
	}
	s := float32(0)
	if shadow {
		s = 1
	}
	r, err := j.exchange(ctx, 1, s)
	if err != nil {
		return r, fmt.Errorf("ddp: join: notifying the joined ranks: %w", err)
	}
	if j.cfg.ThrowOnEarlyTermination && r.Count < len(r.Active) {
		j.failed = j.unevenError(r)
	}
	return r, j.failed
}

// exchange runs one round of the bookkeeping allreduce: one slot per rank
// (1 while it has inputs) and the count of ranks announcing collectives.
func (j *Joiner) exchange(ctx context.Context, active, shadow float32) (JoinRound, error) {
	n := j.group.Size()
	clear(j.ctrl)
	j.ctrl[j.group.Rank()] = active
	j.ctrl[n] = shadow
	if err := j.group.AllReduce(ctx, j.ctrl, distributed.Sum); err != nil {
		return JoinRound{}, err
	}
	j.rounds++
	r := JoinRound{Step: j.rounds, Active: make([]bool, n), Shadow: int(j.ctrl[n]), Root: -1}
	for k := 0; k < n; k++ {
		if j.ctrl[k] != 0 {
			r.Active[k] = true
			r.Count++
			r.Root = k
		}
	}
	if r.Count > 0 {
		j.last = r.Root
	}
	j.round = r
	return r, nil
}

// unevenError is the ThrowOnEarlyTermination failure of round r, worded
// the same on every rank.
func (j *Joiner) unevenError(r JoinRound) error {
	var done, more []int
	for k, a := range r.Active {
		if a {
			more = append(more, k)
		} else {
			done = append(done, k)
		}
	}
	return fmt.Errorf("%w: rank(s) %v ran out of inputs at join round %d while rank(s) %v still had some (ThrowOnEarlyTermination)",
		ErrUnevenInputs, done, r.Step, more)
}

// skewWarning is the number of shadow rounds after which Join warns that
// the inputs are very uneven, as PyTorch does.
const skewWarning = 1000

// Join runs f, this rank's training loop over its own inputs, so that
// ranks with fewer inputs than others finish without failing or hanging
// the rest: PyTorch's Join context manager. Once f returns, the rank
// shadows the collectives of the ranks still training (each joinable's
// JoinHook), contributing nothing to them, until every rank has returned;
// then the post-hooks run (DDP: every rank takes the model of the last
// rank to finish, so all replicas end equal).
//
// Gradients are averaged as JoinConfig describes. Every iteration of f
// must run its joinables' collectives in the usual order: for DDP, one
// Forward before each Backward, as in PyTorch. Other collectives in f
// (an allreduce of the loss, say) cannot be shadowed: use
// ThrowOnEarlyTermination for those loops.
//
// A joined rank's optimizer does not step, so its state (momentum, Adam's
// moments) falls behind while the parameters are taken from the last
// joiner: run the whole training, every epoch, inside one Join, as with
// PyTorch.
//
// If f returns an error, Join returns it at once, issuing no more
// collectives: the ranks still training then fail as they do when a peer
// fails (fast when its process exits, else at the group's timeout).
// Join panics if joinables is empty or they use different groups.
func Join(ctx context.Context, joinables []Joinable, f func(ctx context.Context) error, opts ...JoinOption) error {
	if len(joinables) == 0 {
		panic("ddp: Join: no joinables")
	}
	j := &Joiner{cfg: JoinConfig{DivideByInitialWorldSize: true}, first: joinables[0], group: joinables[0].JoinGroup(), last: -1}
	for _, o := range opts {
		o(&j.cfg)
	}
	for i, jb := range joinables {
		if jb.JoinGroup() != j.group {
			panic(fmt.Sprintf("ddp: Join: joinable %d uses a different process group from joinable 0", i))
		}
	}
	j.ctrl = make([]float32, j.group.Size()+1)
	hooks := make([]JoinHook, len(joinables))
	j.inside = true
	defer func() { j.inside = false }()
	for i, jb := range joinables {
		hooks[i] = jb.JoinHook(j)
	}
	if err := f(ctx); err != nil {
		return err
	}
	if j.failed != nil {
		return j.failed // f swallowed the failure; the others have it too
	}
	lastJoiner := true
	for shadowed := 0; ; shadowed++ {
		r, err := j.exchange(ctx, 0, 0)
		if err != nil {
			return fmt.Errorf("ddp: join: rank %d waiting for the ranks still training: %w", j.group.Rank(), err)
		}
		if r.Count == 0 {
			break
		}
		lastJoiner = false
		if j.cfg.ThrowOnEarlyTermination {
			j.failed = j.unevenError(r)
			return j.failed
		}
		if shadowed == skewWarning {
			slog.Warn("ddp: join: very uneven inputs: this rank has shadowed the others for many rounds",
				"rank", j.group.Rank(), "rounds", shadowed)
		}
		for i, h := range hooks {
			if err := h.MainHook(ctx, r); err != nil {
				return fmt.Errorf("ddp: join: rank %d shadowing round %d (joinable %d): %w", j.group.Rank(), r.Step, i, err)
			}
		}
	}
	root := j.last
	if root < 0 { // no rank had any input: all joined together
		root = j.group.Size() - 1
	}
	for i, h := range hooks {
		if err := h.PostHook(ctx, lastJoiner, root); err != nil {
			return fmt.Errorf("ddp: join: final synchronisation from rank %d (joinable %d): %w", root, i, err)
		}
	}
	return nil
}

// Join runs f under Join with m as the only joinable:
// PyTorch's model.join().
func (m *Model) Join(ctx context.Context, f func(ctx context.Context) error, opts ...JoinOption) error {
	return Join(ctx, []Joinable{m}, f, opts...)
}

// JoinHook attaches m to j (see Joinable). It panics if m is already in a
// running Join.
func (m *Model) JoinHook(j *Joiner) JoinHook {
	if m.join != nil && m.join.inside {
		panic("ddp: Model.JoinHook: the model is already inside a Join")
	}
	m.join = j
	return &modelJoinHook{m: m}
}

// JoinGroup returns the group m reduces over.
func (m *Model) JoinGroup() Group { return m.group }

// joiner returns the Join m is inside, or nil.
func (m *Model) joiner() *Joiner {
	if m.join != nil && m.join.inside {
		return m.join
	}
	return nil
}

// notifyJoin is Forward's part in a Join: the round's bookkeeping, and the
// gradient scale and broadcast root for the pass that follows. A failure
// is returned by the next Backward.
func (m *Model) notifyJoin(j *Joiner) {
	m.joinScale = 1
	r, err := j.Notify(m.commCtx, m, !m.noSync && tensor.GradEnabled())
	if err != nil {
		if m.deferred == nil {
			m.deferred = err
		}
		return
	}
	if !j.cfg.DivideByInitialWorldSize && r.Count > 0 && r.Count < len(r.Active) {
		m.joinScale = float32(len(r.Active)) / float32(r.Count)
	}
}

// joinHalted reports the uneven-input failure that stops m's collectives
// for the rest of its Join.
func (m *Model) joinHalted() error {
	if j := m.joiner(); j != nil {
		return j.failed
	}
	return nil
}

// broadcastRoot is the rank whose buffers and bucket order the others
// take: rank 0, or inside a Join the highest rank still training.
func (m *Model) broadcastRoot() int {
	if j := m.joiner(); j != nil && j.round.Root >= 0 {
		return j.round.Root
	}
	return 0
}

// scaleJoinedGradients turns the reduced gradients from an average over
// the whole world into one over the ranks that still had inputs, when
// the Join divides by those.
func (m *Model) scaleJoinedGradients() {
	if m.joinScale == 0 || m.joinScale == 1 || m.joiner() == nil {
		return
	}
	for _, b := range m.buckets {
		for i := range b {
			b[i] *= m.joinScale
		}
	}
}

// modelJoinHook shadows a Model's collectives on a joined rank.
type modelJoinHook struct {
	m    *Model
	zero [][]float32 // per bucket, zeroed before each reduction
}

// MainHook matches one Forward and, if the active ranks reduce gradients,
// one Backward: the buffer broadcast, every bucket through the comm hook
// as zeros, and the one-time agreement on the rebuilt bucket order.
func (h *modelJoinHook) MainHook(ctx context.Context, r JoinRound) error {
	m := h.m
	if m.cfg.broadcastBuffers && len(m.buffers) > 0 && m.group.Size() > 1 {
		if err := broadcastTensors(ctx, m.group, m.buffers, r.Root); err != nil {
			return fmt.Errorf("ddp: broadcasting buffers: %w", err)
		}
	}
	if r.Shadow == 0 || m.group.Size() < 2 {
		return nil
	}
	if len(h.zero) != len(m.buckets) {
		h.zero = make([][]float32, len(m.buckets))
	}
	f := passFailure{pass: -1}
	for b := range m.buckets {
		if len(h.zero[b]) != len(m.buckets[b]) {
			h.zero[b] = make([]float32, len(m.buckets[b]))
		}
		clear(h.zero[b])
		// The zero bucket goes through the model's own hook, so a
		// compressing hook's collectives match the active ranks'.
		j := job{pass: -2, bucket: b, buf: h.zero[b], done: make(chan error, 1)}
		if m.layouts != nil {
			j.params, j.last = m.layouts[b], b == len(m.layouts)-1
		}
		m.reduce(ctx, j, &f)
		if err := <-j.done; err != nil {
			return fmt.Errorf("ddp: reducing zero gradient bucket %d: %w", b, err)
		}
	}
	if !m.rebuilt {
		m.rebuilt = true
		return m.rebuildBuckets()
	}
	return nil
}

// PostHook copies the parameters (and, with BroadcastBuffers, the
// buffers) of rank root to every rank, so all replicas end equal.
func (h *modelJoinHook) PostHook(ctx context.Context, _ bool, root int) error {
	m := h.m
	if m.group.Size() < 2 {
		return nil
	}
	ts := append([]*tensor.Tensor(nil), m.params...)
	if m.cfg.broadcastBuffers {
		ts = append(ts, m.buffers...)
	}
	return broadcastTensors(ctx, m.group, ts, root)
}
