package fsdp

import (
	"context"
	"fmt"

	"github.com/gotrain/gotrain/tensor"
)

// Evaluate runs f, which runs forward passes of the wrapped module
// outside training (an evaluation, sampling) through the module itself
// (its Forward, or any method that runs the units through
// nn.Call) or m.Forward, with autograd off. No rank holds the
// whole model for it: with FullShard and HybridShard the root unit is
// gathered for the whole of f and every other unit just before its own
// Forward and freed right after it, the next unit's gather in flight
// meanwhile (as in a training forward pass), and nothing is kept for a
// backward pass, so a rank holds the root and at most two other units'
// full parameters. With ShardOptimizer and ShardGradOp, whose module
// keeps the full parameters, they are first gathered again from the
// shards the optimizer has updated. With BroadcastBuffers rank 0's
// buffers are copied to every rank first, as Forward does.
//
// The gathers are collectives: every rank of the group must call
// Evaluate and run the same forward passes (the same units, in the same
// order) in f. It returns the first gather's error, or else f's.
func (m *Model) Evaluate(ctx context.Context, f func() error) (err error) {
	defer tensor.SetGradEnabled(tensor.SetGradEnabled(false))
	if m.cfg.broadcastBuffers && len(m.buffers) > 0 && m.world.Size() > 1 {
		if err := broadcastTensors(ctx, m.world, m.buffers, m.root); err != nil {
			return fmt.Errorf("fsdp: broadcasting buffers to evaluate: %w", err)
		}
	}
	if !m.releases() {
		if err := m.gather(ctx, true); err != nil {
			return err
		}
		m.evaluating = true
		defer func() { m.evaluating = false }()
		return f()
	}
	m.release()
	// The training pass's unit order guides the first pass's prefetch;
	// the next training pass finds it again.
	fwdSeq, prevSeq := m.fwdSeq, m.prevSeq
	m.prevSeq, m.fwdSeq, m.fwdStack, m.fwdErr = m.fwdSeq, nil, m.fwdStack[:0], nil
	var roots []int
	for ui, u := range m.units {
		if u.root && len(u.params) > 0 {
			roots = append(roots, ui)
			m.startGather(ctx, ui, true)
		}
	}
	if m.cfg.prefetch {
		m.prefetchForward(-1)
	}
	for _, ui := range roots {
		if err := m.finishGather(ctx, ui, true); err != nil {
			m.release()
			m.fwdSeq, m.prevSeq = fwdSeq, prevSeq
			return err
		}
	}
	m.perUnit, m.evaluating = true, true
	defer func() {
		r := recover()
		if r != nil {
			r = m.explainPanic(r)
		}
		m.perUnit, m.evaluating = false, false
		m.dropGathers() // the prefetch of a pass that did not come
		m.release()
		m.fwdSeq, m.prevSeq, m.fwdStack = fwdSeq, prevSeq, m.fwdStack[:0]
		if r != nil {
			panic(r)
		}
		if m.fwdErr != nil {
			err, m.fwdErr = m.fwdErr, nil
		}
	}()
	return f()
}

// firstUnit is the first non-root unit with parameters in Units order,
// -1 if there is none.
func (m *Model) firstUnit() int {
	for ui, u := range m.units {
		if !u.root && len(u.params) > 0 {
			return ui
		}
	}
	return -1
}
