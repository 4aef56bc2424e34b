package harness

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/ddp/ft"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// EnvFTTrace set to 1 makes a fault-tolerant run log, after each
// committed step, the sha256 of its parameters ("ft: committed" records
// with step and weights): replicas that agree print the same hashes,
// which is how a test sees that a restarted replica healed.
const EnvFTTrace = "GOTRAIN_FT_TRACE"

// ftRun is a Run's fault tolerance (Config.FT): its replica's place, as
// the launcher gave it, and from Train's first step on its ft.Manager,
// which replaces the process group: there is none, each step's quorum
// has its own.
type ftRun struct {
	id            string
	replicas, min int
	join          bool
	addr, token   string
	liveness      time.Duration // $GOTRAIN_HEARTBEAT_TIMEOUT, the peers' silence bound; 0 for ft's default
	st            *store.Client
	mgr           *ft.Manager
	log           *slog.Logger
	trace         bool
	params        []*tensor.Tensor // whose gradients each step averages
	asked, commit bool             // the step's Update was called, and its verdict
	averaged      bool             // the step's gradients have been averaged
	members       []string         // the last quorum's replica IDs
	recovering    []string         // the last quorum's replicas healing
	failures      int              // member failures survived (see observe)
	// Under DiLoCo or LocalSGD (see Run.outerFT): local, the quorum is
	// taken at outer steps and no gradient is averaged; silent, this
	// replica holds a copy of a peer's state, healed at the outer step
	// not yet committed, and adds nothing of its own to it; presync, the
	// quorum being taken is an outer step's, whose reduction follows
	// (false for the first quorum of a run), as a heal tells a joiner.
	local, silent, presync bool
}

// errFTNeedsLauncher is Start's error for Config.FT without the
// launcher's fault tolerance around the process.
var errFTNeedsLauncher = errors.New("harness: fault tolerance (--ft) needs its launcher: run the job under `gotrain run --ft` (or `gotrain run ... PROGRAM train ... --ft`), which serves the replicas' store and restarts a failed worker")

// startFT reads the replica's place from the launcher's environment
// (launch.EnvFT and the rest) and dials the job's store, which the
// launcher serves.
func startFT(ctx context.Context, cfg Config, log *slog.Logger) (*ftRun, error) {
	if os.Getenv(launch.EnvFT) != "1" || os.Getenv(launch.EnvAgentStore) != "1" {
		return nil, errFTNeedsLauncher
	}
	f := &ftRun{id: os.Getenv(launch.EnvFTReplicaID), join: os.Getenv(launch.EnvFTJoin) == "1",
		token: os.Getenv(launch.EnvToken), log: log, trace: os.Getenv(EnvFTTrace) == "1"}
	var err error
	if f.replicas, err = strconv.Atoi(os.Getenv(launch.EnvFTReplicas)); err != nil || f.replicas < 1 {
		return nil, fmt.Errorf("harness: %s=%q: want the number of replicas", launch.EnvFTReplicas, os.Getenv(launch.EnvFTReplicas))
	}
	if f.min, err = strconv.Atoi(os.Getenv(launch.EnvFTMinReplicas)); err != nil || f.min < 1 {
		return nil, fmt.Errorf("harness: %s=%q: want the fewest replicas that train", launch.EnvFTMinReplicas, os.Getenv(launch.EnvFTMinReplicas))
	}
	if cfg.MinReplicas > 0 {
		f.min = cfg.MinReplicas
	}
	if v := os.Getenv("GOTRAIN_HEARTBEAT_TIMEOUT"); v != "" {
		if f.liveness, err = time.ParseDuration(v); err != nil || f.liveness <= 0 {
			return nil, fmt.Errorf("harness: GOTRAIN_HEARTBEAT_TIMEOUT=%q is not a positive duration", v)
		}
	}
	f.addr = net.JoinHostPort(os.Getenv(launch.EnvMasterAddr), os.Getenv(launch.EnvMasterPort))
	tc, err := tlsconf.LoadEnv(os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	if f.st, err = store.Dial(ctx, f.addr, []byte(f.token), store.WithTLS(tc)); err != nil {
		return nil, fmt.Errorf("harness: the replicas' store: %w", err)
	}
	return f, nil
}

// start makes the replica's Manager for the training state st: a
// restarted replica (launch.EnvFTJoin) heals from a live peer, the others
// start at st's step.
func (f *ftRun) start(ctx context.Context, st *checkpoint.TrainingState, params []*tensor.Tensor, extra ...string) error {
	f.params = params
	var shapes [][]int
	for _, p := range params {
		shapes = append(shapes, p.Shape())
	}
	step := st.Step
	if f.join {
		step = -1
	}
	mgr, err := ft.New(ctx, ft.Config{
		ReplicaID: f.id, Store: f.st, StoreAddr: f.addr,
		Group:    distributed.Config{Token: f.token, HeartbeatTimeout: f.liveness},
		Replicas: f.replicas, MinReplicas: f.min,
		ModelHash: ft.ShapeHash(shapes, extra...),
		Step:      step,
		Snapshot:  func() ([]byte, error) { return f.snapshot(st) },
		Load:      func(b []byte) error { return f.load(st, b) },
		Logger:    f.log,
	})
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	f.mgr = mgr
	return nil
}

// update is Step.Update's answer under FT: the gradients averaged over
// the step's quorum, then whether every member completed the step. A
// peer lost mid-step fails the allreduce; the step is then discarded on
// every member (false, no error), and retried on the same data.
func (f *ftRun) update(ctx context.Context) (bool, error) {
	f.asked = true
	f.average(ctx)
	ok, err := f.mgr.ShouldCommit(ctx)
	if err != nil {
		return false, fmt.Errorf("harness: %w", err)
	}
	f.commit = ok
	return ok, nil
}

// average averages the step's gradients over its quorum, once a step
// (Run.ClipGradNorm may have done it before Update). A failure is
// recorded: ShouldCommit then says false on every member.
func (f *ftRun) average(ctx context.Context) {
	if f.averaged || f.local {
		return
	}
	f.averaged = true
	_ = f.mgr.AllReduceGrads(ctx, f.params)
}

// close stops the Manager and hangs up on the store.
func (f *ftRun) close() error {
	var err error
	if f.mgr != nil {
		err = f.mgr.Close()
	}
	if f.st != nil {
		err = errors.Join(err, f.st.Close())
	}
	return err
}

// summarise adds the counts of what the replica survived:
// failures_survived (see observe), steps_lost, the steps discarded, and
// heals, the state transfers it served or received.
func (f *ftRun) summarise(s *event.Summary) {
	if f == nil || f.mgr == nil {
		return
	}
	st := f.mgr.Stats()
	s.Add("failures_survived", "%d", f.failures)
	s.Add("steps_lost", "%d", st.StepsLost)
	s.Add("heals", "%d", st.Heals)
}

// observe follows the membership from one step's quorum q to the next,
// logging who left, who joined and who healed (if log), counting the
// member failures the replica survived (a member dropped from the
// quorum, and a member restarted in place: it rejoined, healing, before
// the quorum dropped it; its own restart included), and returning the
// changes, one per replica, for the launcher's display.
func (f *ftRun) observe(q ft.Quorum, log bool) []event.ReplicaChange {
	ids := q.IDs()
	var changes []event.ReplicaChange
	change := func(what, id string) {
		c := event.ReplicaChange{Change: what, Replica: id, Replicas: len(ids), Of: f.replicas, Step: q.MaxStep}
		if what == event.ReplicaHealed {
			c.Source = q.Source
		}
		changes = append(changes, c)
	}
	if f.members == nil {
		if f.join && slices.Contains(q.Recover, f.id) {
			f.failures++
		}
	} else {
		for _, id := range f.members {
			if !slices.Contains(ids, id) {
				f.failures++
				change(event.ReplicaLeft, id)
				if log {
					f.log.Warn("ft: a replica left; the others train on", "replica", id, "replicas", len(ids), "step", q.MaxStep)
				}
			}
		}
		for _, id := range ids {
			switch {
			case slices.Contains(q.Recover, id) && slices.Contains(f.recovering, id):
				// the same heal, retried
			case slices.Contains(q.Recover, id) && slices.Contains(f.members, id):
				f.failures++
				if log {
					f.log.Warn("ft: a replica was restarted; it heals from a peer", "replica", id, "step", q.MaxStep)
				}
			case !slices.Contains(f.members, id):
				change(event.ReplicaJoined, id)
				if log {
					f.log.Info("ft: a replica joined", "replica", id, "replicas", len(ids), "step", q.MaxStep, "heals", slices.Contains(q.Recover, id))
				}
			}
		}
	}
	for _, id := range q.Recover {
		if !slices.Contains(f.recovering, id) || f.members == nil {
			change(event.ReplicaHealed, id)
		}
	}
	f.members, f.recovering = ids, q.Recover
	return changes
}

// observeFT follows the membership to the current quorum (ftRun.observe)
// and, on the quorum's rank 0, sends each change to the launcher's
// display.
func (r *Run) observeFT() {
	f := r.ft
	changes := f.observe(f.mgr.Quorum(), r.rank == 0)
	if r.rank != 0 || r.rep == nil {
		return
	}
	for _, c := range changes {
		if err := r.rep.Emit(event.KindReplicas, c); err != nil {
			r.log.Warn("ft: reporting a replica change", "err", err)
		}
	}
}

// snapshotState is st's bytes, the heal payload: the training
// checkpoint's sidecar, which holds the model, the optimizer, the
// schedule and the counters (checkpoint.SaveTraining).
func snapshotState(st *checkpoint.TrainingState) ([]byte, error) {
	dir, err := os.MkdirTemp("", "gotrain-ft-")
	if err != nil {
		return nil, fmt.Errorf("harness: snapshot: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.safetensors")
	if err := checkpoint.SaveTraining(path, *st); err != nil {
		return nil, fmt.Errorf("harness: snapshot: %w", err)
	}
	return os.ReadFile(checkpoint.TrainingPath(path))
}

// loadState replaces st with a peer's snapshot b.
func loadState(st *checkpoint.TrainingState, b []byte) error {
	dir, err := os.MkdirTemp("", "gotrain-ft-")
	if err != nil {
		return fmt.Errorf("harness: heal: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.safetensors")
	if err := os.WriteFile(checkpoint.TrainingPath(path), b, 0o600); err != nil {
		return fmt.Errorf("harness: heal: %w", err)
	}
	if err := checkpoint.LoadTraining(path, st); err != nil {
		return fmt.Errorf("harness: heal: %w", err)
	}
	return nil
}

// weightHash is the sha256 of the parameters' values.
func weightHash(params []*tensor.Tensor) string {
	h := sha256.New()
	var b [4]byte
	for _, p := range params {
		for _, v := range p.Data() {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// trainFT is Train under Config.FT. Each step runs the quorum
// (Manager.StartStep, which heals a joining replica from Loop.State's
// snapshot on a live peer), takes this member's share of the step's
// global batch (ft.Sampler: Loop.Data's batch size times the replicas
// the job started with, divided among the members present; the batch is
// assembled only once the membership is known, by Loader.Load, so none
// is prefetched across a change), and lets the Task's Step.Update average
// the gradients and ask whether every member completed it. A discarded
// step steps neither the optimizer nor the schedule nor the counters,
// and the next step retries its data. Under DiLoCo or LocalSGD the
// quorum is taken at the outer steps instead (Run.outerFT), the inner
// steps dividing each global batch among the members of the last one.
func (r *Run) trainFT(ctx context.Context, task Task, l Loop) (Stats, error) {
	f := r.ft
	st := l.State
	f.local = r.lm != nil
	if f.mgr == nil {
		if err := f.start(ctx, st, r.params, r.outerConfig()...); err != nil {
			return Stats{}, err
		}
	}
	sampler := ft.Sampler{N: l.Data.Examples(), GlobalBatch: l.Data.BatchSize() * f.replicas, Shuffle: true, Seed: 1}
	spe := sampler.StepsPerEpoch()
	if spe == 0 {
		return Stats{}, fmt.Errorf("harness: %d examples hold no global batch of %d (batch size %d × %d replicas)", sampler.N, sampler.GlobalBatch, l.Data.BatchSize(), f.replicas)
	}
	total := int64(max(l.Epochs, 1) * spe)
	if l.Steps > 0 {
		total = int64(l.Steps)
	}
	if l.MaxSteps > 0 {
		// The job's step count, the same on every replica, a joining
		// one too: all stop at the same committed step.
		total = min(total, int64(l.MaxSteps))
	}
	p := planOf(&l)
	p.perEpoch, p.total = spe, int(total)
	m, err := r.newMeter(p)
	if err != nil {
		return Stats{}, err
	}
	defer m.close()
	if r.nan == nil {
		r.nan = newGuard(&r.cfg, r.log, nil, r.rank)
	}
	g := r.nan
	if !f.local {
		g.ft = f
	}
	m.nan = g
	stats := Stats{World: f.replicas}
	nn.SetTrain(st.Model, true)
	started := -1
	if f.local && (st.Step < total || f.join) {
		// The quorum the first inner steps train in; a joining replica
		// heals here, at the others' outer step.
		if err := r.outerFT(ctx, st, total, true); err != nil {
			return stats, err
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return stats, err
		}
		var step int64
		if f.local {
			step = st.Step
		} else {
			if f.mgr.Step() >= total {
				break // a joining replica (step -1) takes a quorum first
			}
			if err := f.mgr.StartStep(ctx); err != nil {
				return stats, fmt.Errorf("harness: %w", err)
			}
			// A heal replaced the state: its counters are the peer's.
			step = f.mgr.Step()
			if step < 0 {
				return stats, f.noSource()
			}
			st.Step = step
			r.rank, r.world = f.mgr.Rank(), f.mgr.Size()
			r.observeFT()
		}
		if step >= total {
			break
		}
		epoch := int(step / int64(spe))
		st.Epoch = epoch
		if epoch != started {
			m.startEpoch(epoch)
			started = epoch
		}
		idx, err := sampler.Indices(step, r.rank, r.world)
		if err != nil {
			return stats, fmt.Errorf("harness: %w", err)
		}
		b := l.Data.Load(idx)
		if err := m.begin(ctx, int(step)+1); err != nil {
			return stats, err
		}
		g.begin(int(step)+1, epoch+1)
		f.asked, f.commit, f.averaged = false, false, false
		loss, err := task.Step(ctx, Step{m}, b)
		if err != nil {
			return stats, err
		}
		if f.local {
			st.Step++
			if r.lm.Advance() || st.Step >= total {
				if err := r.outerFT(ctx, st, total, false); err != nil {
					return stats, err
				}
			}
		} else {
			if !f.asked {
				return stats, errors.New("harness: fault tolerance needs the Task's Step to call Step.Update before its optimizer step")
			}
			if !f.commit {
				continue // every member dropped it; the next quorum retries its data
			}
			st.Step = f.mgr.Step()
			if f.trace {
				r.log.Info("ft: committed", "step", st.Step, "weights", weightHash(f.params), "replicas", r.world)
			}
		}
		n := b.Len()
		if l.Tokens {
			n *= b.T
		}
		r.tokens += int64(n)
		r.countsTokens = l.Tokens
		m.end(loss, n)
		if err := g.end(loss); err != nil {
			return stats, err
		}
		end, epochEnd := st.Step >= total, st.Step%int64(spe) == 0
		if l.EvalEvery > 0 && (st.Step%int64(l.EvalEvery) == 0 || end) {
			if err := r.endPeriod(ctx, task, m, "step", int(st.Step), &stats); err != nil {
				return stats, err
			}
		}
		if every := int64(r.cfg.SaveEvery); every > 0 && st.Step%every == 0 && !end && !epochEnd {
			if err := r.checkpoint(ctx, m, &l); err != nil {
				return stats, err
			}
		}
		if !end && !epochEnd {
			continue
		}
		// An epoch, or the training, is over.
		if err := m.stopClock(ctx); err != nil {
			return stats, err
		}
		if e, ok := task.(EpochEnder); ok && epochEnd {
			e.EndEpoch(epoch)
		}
		stats.Epochs = int((st.Step + int64(spe) - 1) / int64(spe))
		if l.EvalEvery == 0 {
			if err := r.endPeriod(ctx, task, m, "epoch", stats.Epochs, &stats); err != nil {
				return stats, err
			}
		}
		if epochEnd {
			st.Epoch = epoch + 1 // a resumed run starts with the next
		}
		if err := r.checkpoint(ctx, m, &l); err != nil {
			return stats, err
		}
	}
	if err := m.closeMetrics(); err != nil {
		return stats, err
	}
	stats = m.summarise(stats)
	stats.World, stats.Rank = r.world, r.rank
	return stats, nil
}

// checkFT refuses what fault tolerance does not combine with.
func (c *Config) checkFT() error {
	switch {
	case c.MinReplicas < 0:
		return fmt.Errorf("MinReplicas %d: want at least 1 (0 takes the launcher's)", c.MinReplicas)
	case !c.FT && c.MinReplicas > 0:
		return fmt.Errorf("MinReplicas %d needs FT", c.MinReplicas)
	case !c.FT:
		return nil
	case c.sharded():
		return fmt.Errorf("FT with Sharding %q: a replica must hold the whole model to heal another; shard within a replica is not built", c.Sharding)
	case c.DiLoCoDelay > 0:
		return fmt.Errorf("FT with DiLoCoDelay %d: a fault-tolerant outer step is agreed before it is applied, so it cannot overlap inner steps; use delay 0", c.DiLoCoDelay)
	case c.OnNaN == OnNaNSkip:
		return errors.New("FT with OnNaN skip: a fault-tolerant step is already committed or discarded by the quorum; use stop or warn")
	}
	return nil
}

// startFT is Start under Config.FT: the replica's place from the
// launcher, the store dialled; the quorum forms at Train's first step.
func (r *Run) startFT(ctx context.Context) error {
	f, err := startFT(ctx, r.cfg, r.log)
	if err != nil {
		return err
	}
	r.ft = f
	// Until the first quorum: the place the launcher gave.
	r.world = f.replicas
	if rank, err := strconv.Atoi(os.Getenv("RANK")); err == nil && rank >= 0 && rank < f.replicas {
		r.rank = rank
	}
	return nil
}
