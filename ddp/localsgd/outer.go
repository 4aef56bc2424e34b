package localsgd

import (
	"context"
	"errors"
	"fmt"

	"github.com/gotrain/gotrain/distributed"
)

// A membership layer (package ddp/ft's quorum) runs each sync itself, so
// that the replicas present agree on it before any of them applies it:
// it calls Advance instead of AfterStep, and when a sync is due it sets
// the group of the replicas present (SetGroup), reduces (Reduce), asks
// whether every replica's reduction succeeded, and then applies (Apply)
// or drops (Discard) the result and retries in a new group. Between
// Reduce and Apply the replica is unchanged, so a retry recomputes the
// same contribution.

// errDelayed is Reduce's error for a Model with Delay: a reduction that
// overlaps inner steps cannot be dropped and redone.
var errDelayed = errors.New("localsgd: a sync agreed before it is applied needs Delay 0 (a delayed reduction overlaps inner steps and cannot be redone)")

// SetGroup replaces the group the syncs run over with g, such as the
// group of the replicas present in a fault-tolerant job's latest quorum.
// Call it between steps, with no delayed reduction in flight; what
// Reduce reduced and Apply did not apply is dropped.
func (m *Model) SetGroup(g Group) error {
	m.Discard()
	for _, f := range m.frags {
		if f.pending != nil {
			return fmt.Errorf("localsgd: a new group at step %d with fragment %d's reduction in flight", m.step, f.index)
		}
		f.words, f.all = nil, nil // sized for the old group
	}
	m.g = g
	m.contributors = g.Size()
	return nil
}

// Advance counts an inner step without syncing (call it after each
// optimizer step instead of AfterStep) and reports whether a sync is due
// at the step's end.
func (m *Model) Advance() bool {
	m.step++
	return m.Due()
}

// Due reports whether a fragment syncs at the end of the current step by
// the schedule (never at step 0).
func (m *Model) Due() bool {
	if m.step == 0 {
		return false
	}
	for _, f := range m.frags {
		if int(m.step%int64(m.h)) == f.phase {
			return true
		}
	}
	return false
}

// Reduce reduces the fragments due at the current step (every fragment
// with all) over the group, with the buffers if the last fragment is
// among them, and keeps their averages for Apply; the replica itself
// does not change. A replica whose contribute is false sends zeros: one
// that has just copied a peer's state, whose contribution would count
// that peer twice. The average divides the sum by the number of replicas
// that contributed, found by a first allreduce of one number (if none
// did, every replica contributes: they all hold a peer's state). An
// error is the group's; Discard then drops what was reduced.
func (m *Model) Reduce(ctx context.Context, all, contribute bool) error {
	if m.cfg.delay != 0 {
		return errDelayed
	}
	m.Discard()
	count := []float32{0}
	if contribute {
		count[0] = 1
	}
	if err := m.g.AllReduce(ctx, count, distributed.Sum); err != nil {
		return fmt.Errorf("localsgd: counting the contributors at step %d: %w", m.step, err)
	}
	n := int(count[0])
	if n == 0 {
		n, contribute = m.g.Size(), true
	}
	m.contributors = n
	m.silent = !contribute
	defer func() { m.silent = false }()
	last := false
	for _, f := range m.frags {
		if !all && int(m.step%int64(m.h)) != f.phase {
			continue
		}
		if err := m.start(ctx, f, m.step); err != nil {
			m.Discard()
			return err
		}
		m.reduced = append(m.reduced, f) // before finish: Discard clears it
		if err := m.finish(ctx, f); err != nil {
			m.Discard()
			return err
		}
		last = last || f.index == len(m.frags)-1
	}
	if !last || len(m.buffers) == 0 {
		return nil
	}
	size := 0
	for _, b := range m.buffers {
		size += b.Len()
	}
	flat := make([]float32, 0, size)
	for _, b := range m.buffers {
		flat = append(flat, b.Data()...)
	}
	if !contribute {
		clear(flat)
	}
	m.stats.SentBytes += 4 * int64(size)
	if err := m.g.AllReduce(ctx, flat, distributed.Sum); err != nil {
		m.Discard()
		return fmt.Errorf("localsgd: averaging the buffers at step %d: %w", m.step, err)
	}
	for i := range flat {
		flat[i] /= float32(n)
	}
	m.bufAvg = flat
	return nil
}

// Apply applies what Reduce reduced: for each fragment the average
// (LocalSGD), or the outer optimizer's step of θ_global with the
// averaged outer gradient (DiLoCo), as AfterStep would; then the
// averaged buffers. It runs no collective.
func (m *Model) Apply() {
	for _, f := range m.reduced {
		m.applyFinished(f)
	}
	if m.bufAvg != nil {
		off := 0
		for _, b := range m.buffers {
			off += copy(b.Data(), m.bufAvg[off:])
		}
	}
	m.reduced, m.bufAvg = nil, nil
}

// Discard drops what Reduce reduced, leaving the replica as it was.
func (m *Model) Discard() {
	for _, f := range m.reduced {
		f.pending = nil
	}
	m.reduced, m.bufAvg = nil, nil
}
