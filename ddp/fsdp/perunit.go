package fsdp

import (
	"fmt"
	"strings"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// Per-unit gathering (FullShard and HybridShard, as PyTorch's FSDP2
// fully_shard with reshard_after_forward=True): the root unit is gathered
// for the whole step; every other unit is gathered by a forward pre-hook
// on its module, freed by its forward hook, gathered again by a backward
// pre-hook on its output and freed once its gradients are reduced. The
// next unit's gather is started before the current unit runs (forward: the
// next one in forward order; backward: the one before), so that its
// transfer overlaps this unit's compute.

// installUnitHooks registers the hooks on every non-root unit with
// parameters: with FullShard and HybridShard they gather and free it,
// with ShardGradOp they lend its parameters gradient storage as its
// backward starts (postForward).
func (m *Model) installUnitHooks() {
	for ui, u := range m.units {
		if u.root || len(u.params) == 0 {
			continue
		}
		m.removers = append(m.removers,
			nn.RegisterForwardPreHook(u.mod, func(nn.Module, *tensor.Tensor) { m.preForward(ui) }),
			nn.RegisterForwardHook(u.mod, func(_ nn.Module, _, y *tensor.Tensor) { m.postForward(ui, y) }))
	}
}

// forwardPerUnit runs the module with per-unit gathering.
func (m *Model) forwardPerUnit(x *tensor.Tensor) (y *tensor.Tensor, err error) {
	// Whatever an earlier pass left gathered (a forward without backward,
	// a NoSync backward) is gathered again from the shards, which an
	// optimizer step may have changed since.
	m.release()
	m.prevSeq, m.fwdSeq, m.fwdStack, m.fwdErr = m.fwdSeq, nil, m.fwdStack[:0], nil
	var roots []int
	for ui, u := range m.units {
		if u.root && len(u.params) > 0 {
			roots = append(roots, ui)
			m.startGather(m.ctx, ui, true)
		}
	}
	if m.cfg.prefetch {
		m.prefetchForward(-1)
	}
	for _, ui := range roots {
		if err := m.finishGather(m.ctx, ui, true); err != nil {
			m.release()
			return nil, err
		}
	}
	m.perUnit = true
	defer func() {
		m.perUnit = false
		if r := recover(); r != nil {
			m.dropGathers()
			panic(m.explainPanic(r))
		}
	}()
	y = m.module.Forward(x)
	m.perUnit = false
	m.dropGathers() // prefetched for a unit this pass did not run
	if !tensor.GradEnabled() || m.fwdErr != nil {
		m.release() // no backward follows
	}
	if m.fwdErr != nil {
		return nil, m.fwdErr
	}
	return y, nil
}

// explainPanic adds to a panic inside the module's Forward the units that
// had not run: a unit called other than through nn.Call runs on
// parameters without values.
func (m *Model) explainPanic(r any) any {
	ran := map[int]bool{}
	for _, ui := range m.fwdSeq {
		ran[ui] = true
	}
	var missing []string
	for ui, u := range m.units {
		if !u.root && len(u.params) > 0 && !ran[ui] {
			missing = append(missing, u.name)
		}
	}
	if len(missing) == 0 {
		return r
	}
	return fmt.Sprintf("%v [fsdp: when this panicked, units %s had not been gathered: with FullShard a unit's parameters hold values only while its module runs through nn.Call]",
		r, strings.Join(missing, ", "))
}

// preForward gathers unit ui for its Forward and prefetches the next.
func (m *Model) preForward(ui int) {
	if !m.perUnit {
		return
	}
	m.fwdStack = append(m.fwdStack, len(m.fwdSeq))
	m.fwdSeq = append(m.fwdSeq, ui)
	if !m.units[ui].full {
		if err := m.finishGather(m.ctx, ui, true); err != nil {
			if m.fwdErr == nil {
				m.fwdErr = err
			}
			m.fillZeros(ui) // the pass runs to its end, and ForwardErr fails
		}
	}
	if m.cfg.prefetch {
		m.prefetchForward(ui)
	}
}

// prefetchForward starts the gather of the unit expected to run after
// unit cur (-1: the first): the one that followed it in the previous
// forward pass, or else the next unit in Units order.
func (m *Model) prefetchForward(cur int) {
	next := -1
	pos := len(m.fwdSeq) // the position of the next unit to run
	if pos < len(m.prevSeq) && (pos == 0 || m.prevSeq[pos-1] == cur) {
		next = m.prevSeq[pos]
	} else {
		for ui := cur + 1; ui < len(m.units); ui++ {
			if u := m.units[ui]; !u.root && len(u.params) > 0 {
				next = ui
				break
			}
		}
		if next < 0 && m.evaluating {
			next = m.firstUnit() // Evaluate's next pass starts
		}
	}
	if next >= 0 {
		if u := m.units[next]; !u.full && u.gather == nil {
			m.startGather(m.ctx, next, true)
		}
	}
}

// postForward frees unit ui after its Forward and, if a backward pass
// will go through its output y, hooks y to gather the unit again first.
// With ShardGradOp, which keeps the unit gathered, the hook only lends
// the unit's parameters their gradient storage.
func (m *Model) postForward(ui int, y *tensor.Tensor) {
	if m.cfg.strategy == ShardGradOp {
		if backwardFollows(y) {
			y.AddBackwardPreHook(func(*tensor.Pass, *tensor.Tensor) { m.pooledGrads(ui) })
		}
		return
	}
	if !m.perUnit || len(m.fwdStack) == 0 {
		return
	}
	pos := m.fwdStack[len(m.fwdStack)-1]
	m.fwdStack = m.fwdStack[:len(m.fwdStack)-1]
	m.releaseUnit(ui)
	if y == nil || !y.RequiresGrad() || y.IsLeaf() || !tensor.GradEnabled() {
		return
	}
	prev := -1
	if pos > 0 {
		prev = m.fwdSeq[pos-1]
	}
	y.AddBackwardPreHook(func(pass *tensor.Pass, _ *tensor.Tensor) { m.preBackward(pass, ui, prev) })
}

// preBackward gathers unit ui before backward runs its ops, and
// prefetches unit prev, whose backward comes next.
func (m *Model) preBackward(pass *tensor.Pass, ui, prev int) {
	if !m.units[ui].full {
		if err := m.finishGather(m.ctx, ui, true); err != nil {
			pass.OnFinish(func() error { return err })
			m.fillZeros(ui) // backward runs to its end, and returns err
		}
	}
	m.pooledGrads(ui)
	if !m.cfg.prefetch || prev < 0 {
		return
	}
	if u := m.units[prev]; !u.root && !u.full && u.gather == nil && !m.unitDone(pass, prev) {
		m.startGather(m.ctx, prev, true)
	}
}

// pooledGrads gives unit ui's parameters that have no gradient yet one
// from the buffer pool, zeroed lazily (tensor's ZeroGrad: the ops that
// write a whole gradient skip the zeros), which launch hands back once
// the gradient is reduced. Every step then reuses the same memory
// instead of leaving a unit's full gradients to the collector.
func (m *Model) pooledGrads(ui int) {
	for _, i := range m.units[ui].params {
		p := m.params[i]
		if p.t.Grad() != nil {
			continue // NoSync accumulation
		}
		buf, _ := m.bufs.take(p.numel)
		p.t.SetGrad(tensor.New(buf, p.shape...))
		p.t.ZeroGrad()
		p.pooledGrad = true
	}
}

// unitDone reports whether unit ui's gradients were reduced in pass. In
// a NoSync pass a unit stays gathered after its backward, as its full
// gradients do, until the next Forward.
func (m *Model) unitDone(pass *tensor.Pass, ui int) bool {
	return !m.noSync && m.pass == pass && m.units[ui].pending == 0
}

// fillZeros gives unit ui's parameters zero values after a failed gather,
// so that the pass in progress runs to its end and reports the failure.
func (m *Model) fillZeros(ui int) {
	u := m.units[ui]
	for _, i := range u.params {
		if p := m.params[i]; p.t.Len() != p.numel {
			p.t.SetData(make([]float32, p.numel))
		}
	}
	u.full = true
	m.notePeak()
}

// gatheredBytes is Footprint.Gathered.
func (m *Model) gatheredBytes() int64 {
	var n int64
	for _, p := range m.params {
		if p.shard != p.t {
			n += 4 * int64(p.t.Len())
		}
	}
	for _, u := range m.units {
		if u.gather != nil {
			n += u.gather.bytes
		}
	}
	return n
}

// notePeak records gatheredBytes if it is the most yet.
func (m *Model) notePeak() {
	if n := m.gatheredBytes(); n > m.peak {
		m.peak = n
	}
}

// ResetPeak starts Footprint's PeakGathered again from what is gathered
// now.
func (m *Model) ResetPeak() { m.peak = m.gatheredBytes() }
