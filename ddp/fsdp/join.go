package fsdp

import (
	"context"
	"errors"
	"fmt"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/tensor"
)

// SetJoinStep sets what a rank that has run out of inputs inside
// ddp.Join runs after each shadowed backward pass: the rest of the
// training step on its shards, exactly as the ranks still training run
// it after Backward (ClipGradNorm, the optimizer's Step, the scheduler's).
// A sharded rank that joined still owns its slice of every parameter and
// receives its slice's averaged gradient, so it must keep updating it;
// with NoShard the step keeps its replica equal to the others'. Join
// fails on a rank that shadows a backward pass without a join step.
func (m *Model) SetJoinStep(step func() error) { m.joinStep = step }

// Join runs f under ddp.Join with m as the only joinable.
func (m *Model) Join(ctx context.Context, f func(ctx context.Context) error, opts ...ddp.JoinOption) error {
	return ddp.Join(ctx, []ddp.Joinable{m}, f, opts...)
}

// JoinHook attaches m to j (ddp.Joinable).
func (m *Model) JoinHook(j *ddp.Joiner) ddp.JoinHook {
	m.join = j
	return &joinHook{m: m}
}

// JoinGroup returns the group m's Join runs on: the whole world.
func (m *Model) JoinGroup() ddp.Group { return m.world }

// notifyJoin is ForwardErr's part in a running Join: the round's
// bookkeeping, the buffer broadcast root and the gradient scale.
func (m *Model) notifyJoin() error {
	m.joinScale, m.root = 1, 0
	if !m.join.Running() {
		return nil
	}
	r, err := m.join.Notify(m.ctx, m, !m.noSync && tensor.GradEnabled())
	if err != nil {
		return err
	}
	m.setRound(r)
	return nil
}

func (m *Model) setRound(r ddp.JoinRound) {
	m.joinScale, m.root = 1, 0
	if r.Root >= 0 {
		m.root = r.Root
	}
	if !m.join.Config().DivideByInitialWorldSize && r.Count > 0 && r.Count < len(r.Active) {
		m.joinScale = float32(len(r.Active)) / float32(r.Count)
	}
}

// joinHook shadows a Model's collectives on a rank that joined.
type joinHook struct{ m *Model }

// MainHook matches one ForwardErr of the ranks still training (buffer
// broadcast, the gathers, to which this rank brings its shards) and, if
// they reduce, one Backward with zero gradients, after which the join
// step updates this rank's shards.
func (h *joinHook) MainHook(ctx context.Context, r ddp.JoinRound) error {
	m := h.m
	m.setRound(r)
	defer func() { m.joinScale, m.root = 1, 0 }()
	if m.cfg.broadcastBuffers && len(m.buffers) > 0 && m.world.Size() > 1 {
		if err := broadcastTensors(ctx, m.world, m.buffers, m.root); err != nil {
			return fmt.Errorf("fsdp: broadcasting buffers: %w", err)
		}
	}
	if err := m.gather(ctx, true); err != nil {
		return err
	}
	if m.releases() {
		m.release()
	}
	if r.Shadow == 0 {
		return nil
	}
	if m.joinStep == nil {
		return errors.New("fsdp: this rank ran out of inputs and must still update its shards: call SetJoinStep with the training step after Backward")
	}
	for _, p := range m.params {
		p.t.SetGrad(nil)
		if p.shard != p.t {
			p.shard.ZeroGrad()
		}
	}
	m.inflight = m.inflight[:0]
	for _, ui := range m.order {
		m.launch(ui)
	}
	m.next = len(m.order)
	for _, p := range m.params {
		p.ready = true
	}
	if err := m.finishPass(); err != nil {
		return err
	}
	if err := m.joinStep(); err != nil {
		return fmt.Errorf("fsdp: join step: %w", err)
	}
	return nil
}

// PostHook copies rank root's buffers to every rank (with
// BroadcastBuffers); the parameters need nothing, since every rank kept
// updating its own shards.
func (h *joinHook) PostHook(ctx context.Context, _ bool, root int) error {
	m := h.m
	if !m.cfg.broadcastBuffers || len(m.buffers) == 0 || m.world.Size() < 2 {
		return nil
	}
	return broadcastTensors(ctx, m.world, m.buffers, root)
}
