package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/distributed"
)

// Fault tolerance at DiLoCo's and LocalSGD's outer step (Config.FT with
// Config.DiLoCo or LocalSGD): the replicas train their inner steps
// alone, without a quorum, and the outer step is where they meet. There
// each replica takes a quorum round (ft.Manager.StartStep, posting its
// inner step), reduces its contribution over the quorum's group
// (localsgd.Model.Reduce), and applies the result only if every member's
// reduction succeeded (ShouldCommit); otherwise every member drops it
// and retries in the next round, which leaves out a replica that died.
//
// A replica that dies during the inner steps costs the others nothing
// but the wait for its heartbeat to go stale at the next outer step: its
// own inner steps since the last outer step are lost, and the average is
// taken over the replicas present (renormalised: the sum divided by the
// number that contributed, not by the replicas the job started with), so
// the outer step is the step a job of the survivors would have taken,
// of the same size as a full job's rather than shrunk by the missing
// share. A replacement joins at an outer step and heals there from a
// peer (ft's heal: model, inner optimizer, schedule, counters and
// localsgd's state, with θ_global and the outer momentum), before the
// reduction; holding a copy of its source's replica, it contributes
// zeros that step, so the source's contribution is not counted twice,
// and after the step its parameters are θ_global, as every member's.

// noQuorum is a fault-tolerant LocalSGD or DiLoCo replica's group
// before its first quorum: one rank, with no collective to run.
type noQuorum struct{}

var errNoQuorum = errors.New("harness: a collective before the first quorum")

func (noQuorum) Rank() int          { return 0 }
func (noQuorum) Size() int          { return 1 }
func (noQuorum) SharedMemory() bool { return false }
func (noQuorum) AllReduce(context.Context, any, distributed.ReduceOp) error {
	return errNoQuorum
}
func (noQuorum) Broadcast(context.Context, any, int) error { return errNoQuorum }
func (noQuorum) AllGather(context.Context, any, any) error { return errNoQuorum }

// outerConfig is what replicas of a fault-tolerant DiLoCo or LocalSGD
// run must agree on besides the model's shapes, folded into the model
// hash that the quorum compares; nil without DiLoCo or LocalSGD.
func (r *Run) outerConfig() []string {
	if r.lm == nil {
		return nil
	}
	c := r.cfg
	return []string{r.syncName(), fmt.Sprintf("fragments=%d bf16=%v outer_lr=%s outer_momentum=%s",
		c.DiLoCoFragments, c.DiLoCoBF16, optFloat(c.DiLoCoOuterLR), optFloat(c.DiLoCoOuterMomentum))}
}

func optFloat(p *float64) string {
	if p == nil {
		return "default"
	}
	return fmt.Sprint(*p)
}

// snapshot is the heal payload of st: its bytes (snapshotState), under
// DiLoCo or LocalSGD after one byte that says whether the quorum being
// taken is followed by an outer step's reduction (ftRun.presync), which
// the joiner then takes part in.
func (f *ftRun) snapshot(st *checkpoint.TrainingState) ([]byte, error) {
	b, err := snapshotState(st)
	if err != nil || !f.local {
		return b, err
	}
	flag := byte(0)
	if f.presync {
		flag = 1
	}
	return append([]byte{flag}, b...), nil
}

// load replaces st with a peer's payload from snapshot.
func (f *ftRun) load(st *checkpoint.TrainingState, b []byte) error {
	if !f.local {
		return loadState(st, b)
	}
	if len(b) == 0 || b[0] > 1 {
		return errors.New("harness: heal: the payload does not start with the outer step's flag")
	}
	if err := loadState(st, b[1:]); err != nil {
		return err
	}
	f.presync = b[0] == 1
	return nil
}

// noSource is the error of a replica that joined to heal and found no
// member to heal from.
func (f *ftRun) noSource() error {
	q := f.mgr.Quorum()
	return fmt.Errorf("harness: replica %s joined to heal from a live peer, but its quorum has none (members %s)", f.id, strings.Join(q.IDs(), ", "))
}

// outerFT is the outer step under FT at the end of inner step st.Step
// (see the comment at the top of this file), and before the first inner
// step, where it only takes the quorum they train in: it returns once a
// quorum has committed the step, with r.rank and r.world the replica's
// place in it and the Model's group its group. The inner step it
// returns at is the quorum's: a joining replica's is its source's.
func (r *Run) outerFT(ctx context.Context, st *checkpoint.TrainingState, total int64, first bool) error {
	f := r.ft
	if f.mgr.Step() >= 0 {
		// A run's first quorum (at step 0, or at a resumed step whose
		// outer step the checkpoint holds) only starts the inner steps;
		// a joiner learns which from its heal.
		f.presync = !first && (st.Step >= total || r.lm.Due())
	}
	for {
		f.mgr.SetStep(st.Step)
		if err := f.mgr.StartStep(ctx); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		step := f.mgr.Step()
		if step < 0 {
			return f.noSource()
		}
		st.Step = step
		q := f.mgr.Quorum()
		r.rank, r.world = f.mgr.Rank(), f.mgr.Size()
		r.observeFT()
		if slices.Contains(q.Recover, f.id) {
			f.silent = true
		}
		if err := r.lm.SetGroup(f.mgr.Group()); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		if !f.presync { // a joiner's is its source's
			f.silent = false // its inner steps to come are its own
			return nil       // the start of the run: nothing to sync
		}
		if err := r.lm.Reduce(ctx, step >= total, !f.silent); err != nil {
			f.mgr.Fail(err) // every member discards this outer step
		}
		ok, err := f.mgr.ShouldCommit(ctx)
		if err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		if !ok {
			r.lm.Discard()
			continue
		}
		r.lm.Apply()
		f.silent = false
		if f.trace {
			r.log.Info("ft: committed", "step", st.Step, "weights", weightHash(f.params), "replicas", r.world)
		}
		return nil
	}
}
