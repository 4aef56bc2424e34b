package localsgd

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// stateVersion is the state dict's format; LoadStateDict rejects others.
const stateVersion = "1"

func (m *Model) mode() string {
	if m.diloco {
		return "diloco"
	}
	return "localsgd"
}

// GatherState collects every rank's own parameters and, with
// InnerOptimizer, its inner optimizer state, for StateDict to save them
// all, and waits for a reduction in flight. It is a collective: every
// rank of g calls it at the same step, before rank 0's StateDict.
func (m *Model) GatherState(ctx context.Context, g ddp.Group) error {
	for _, f := range m.frags {
		if f.pending != nil {
			if err := m.finish(ctx, f); err != nil {
				return err
			}
		}
	}
	var inner optim.State
	var keys []string
	n := 0
	for _, p := range m.params {
		n += p.Len()
	}
	if m.cfg.inner != nil {
		inner = m.cfg.inner.StateDict()
		keys = slices.Sorted(maps.Keys(inner.Tensors))
		for _, k := range keys {
			n += inner.Tensors[k].Len()
		}
	}
	world := g.Size()
	lens := make([]int64, world)
	if err := g.AllGather(ctx, lens, []int64{int64(n)}); err != nil {
		return fmt.Errorf("localsgd: gathering the ranks' state sizes: %w", err)
	}
	for r, l := range lens {
		if l != lens[0] {
			return fmt.Errorf("localsgd: gathering state: rank %d holds %d values, rank 0 %d (a different inner optimizer state)", r, l, lens[0])
		}
	}
	mine := make([]float32, 0, n)
	for _, p := range m.params {
		mine = append(mine, p.Data()...)
	}
	for _, k := range keys {
		mine = append(mine, inner.Tensors[k].Data()...)
	}
	all := make([]float32, world*n)
	if err := g.AllGather(ctx, all, mine); err != nil {
		return fmt.Errorf("localsgd: gathering the ranks' parameters: %w", err)
	}
	m.gathered = make([][]float32, world)
	for r := range world {
		m.gathered[r] = all[r*n : (r+1)*n]
	}
	m.innerKeys = keys
	m.gatheredAt = m.step
	return nil
}

// StateDict returns the state a resume needs, copied: the mode and
// schedule ("sync_every", "fragments", "step"), θ_global
// ("global.<i>"), the outer optimizer's state ("outer.…"), a finished
// reduction not yet applied ("pending.<f>", applied at the step in Meta
// "pending.<f>"), and, if GatherState ran at this step, every rank's
// parameters ("local.<r>.<i>") and inner optimizer state
// ("inner.<r>.<name>"). A reduction still in flight is waited for.
func (m *Model) StateDict() optim.State {
	st := optim.State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{
		"localsgd":   stateVersion,
		"mode":       m.mode(),
		"sync_every": strconv.Itoa(m.h),
		"fragments":  strconv.Itoa(len(m.frags)),
		"step":       strconv.FormatInt(m.step, 10),
	}}
	if m.diloco {
		for i, g := range m.globals {
			st.Tensors["global."+strconv.Itoa(i)] = g.Clone()
		}
		outer := m.outer.StateDict()
		for k, v := range outer.Meta {
			st.Meta["outer."+k] = v
		}
		for k, v := range outer.Tensors {
			st.Tensors["outer."+k] = v
		}
	}
	for _, f := range m.frags {
		if f.pending == nil {
			continue
		}
		// Bounded by the collective's own timeout, given when it started.
		if err := m.finish(context.Background(), f); err != nil {
			slog.Warn("localsgd: a reduction in flight failed; the checkpoint resumes without it", "fragment", f.index, "err", err)
			continue
		}
		key := "pending." + strconv.Itoa(f.index)
		st.Meta[key] = strconv.FormatInt(f.pending.applyAt, 10)
		st.Tensors[key] = tensor.New(append([]float32(nil), f.send...), f.numel)
	}
	if m.gathered != nil && m.gatheredAt == m.step {
		st.Meta["ranks"] = strconv.Itoa(len(m.gathered))
		var shapes [][]int
		if m.cfg.inner != nil {
			inner := m.cfg.inner.StateDict()
			for _, k := range m.innerKeys {
				shapes = append(shapes, inner.Tensors[k].Shape())
			}
		}
		for r, flat := range m.gathered {
			off := 0
			for i, p := range m.params {
				st.Tensors[fmt.Sprintf("local.%d.%d", r, i)] = tensor.New(append([]float32(nil), flat[off:off+p.Len()]...), p.Shape()...)
				off += p.Len()
			}
			for j, k := range m.innerKeys {
				t := tensor.Zeros(shapes[j]...)
				off += copy(t.Data(), flat[off:])
				st.Tensors[fmt.Sprintf("inner.%d.%s", r, k)] = t
			}
		}
	}
	return st
}

// LoadStateDict replaces the Model's state with st, from StateDict: it
// must be of the same mode, h and fragment count. If st holds every
// rank's parameters (GatherState) for a group of this size, this rank's
// own replace the model's, and its own inner optimizer state the inner
// optimizer's (with InnerOptimizer); otherwise the replica keeps what
// the checkpoint's model and optimizer loaded. On error nothing is
// changed.
func (m *Model) LoadStateDict(st optim.State) error {
	meta := func(k string) string { return st.Meta[k] }
	if v := meta("localsgd"); v != stateVersion {
		return fmt.Errorf("localsgd: state version %q, want %q", v, stateVersion)
	}
	for k, want := range map[string]string{"mode": m.mode(), "sync_every": strconv.Itoa(m.h), "fragments": strconv.Itoa(len(m.frags))} {
		if meta(k) != want {
			return fmt.Errorf("localsgd: the checkpoint's %s is %q, this run's %q: resume with the same %s", k, meta(k), want, k)
		}
	}
	step, err := strconv.ParseInt(meta("step"), 10, 64)
	if err != nil || step < 0 {
		return fmt.Errorf("localsgd: state: step %q is not a count", meta("step"))
	}
	tensorOf := func(name string, n int) ([]float32, error) {
		t, ok := st.Tensors[name]
		if !ok {
			return nil, fmt.Errorf("localsgd: state: %s is missing", name)
		}
		if t.Len() != n {
			return nil, fmt.Errorf("localsgd: state: %s has %d values, want %d", name, t.Len(), n)
		}
		return t.Data(), nil
	}
	globals := make([][]float32, len(m.globals))
	for i, g := range m.globals {
		if globals[i], err = tensorOf("global."+strconv.Itoa(i), g.Len()); err != nil {
			return err
		}
	}
	pending := make([][]float32, len(m.frags))
	applyAt := make([]int64, len(m.frags))
	for _, f := range m.frags {
		key := "pending." + strconv.Itoa(f.index)
		s, ok := st.Meta[key]
		if !ok {
			continue
		}
		if applyAt[f.index], err = strconv.ParseInt(s, 10, 64); err != nil || applyAt[f.index] < step {
			return fmt.Errorf("localsgd: state: %s applies at step %q, not a step from %d on", key, s, step)
		}
		if pending[f.index], err = tensorOf(key, f.numel); err != nil {
			return err
		}
	}
	var locals [][]float32
	var inner optim.State
	rank := m.g.Rank()
	if r, _ := strconv.Atoi(meta("ranks")); r > 0 {
		if r != m.g.Size() {
			slog.Info("localsgd: the checkpoint's world differs: every rank resumes from rank 0's replica", "saved", r, "world", m.g.Size())
		} else {
			locals = make([][]float32, len(m.params))
			for i, p := range m.params {
				if locals[i], err = tensorOf(fmt.Sprintf("local.%d.%d", rank, i), p.Len()); err != nil {
					return err
				}
			}
			if m.cfg.inner != nil {
				inner = m.cfg.inner.StateDict()
				prefix := fmt.Sprintf("inner.%d.", rank)
				for k, t := range inner.Tensors {
					if inner.Tensors[k], err = tensorCopy(st.Tensors[prefix+k], t, prefix+k); err != nil {
						return err
					}
				}
			}
		}
	}
	var outerBefore optim.State
	if m.diloco {
		outerBefore = m.outer.StateDict()
		outer := optim.State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{}}
		for k, v := range st.Meta {
			if name, ok := strings.CutPrefix(k, "outer."); ok {
				outer.Meta[name] = v
			}
		}
		for k, v := range st.Tensors {
			if name, ok := strings.CutPrefix(k, "outer."); ok {
				outer.Tensors[name] = v
			}
		}
		if err := m.outer.LoadStateDict(outer); err != nil {
			return fmt.Errorf("localsgd: loading the outer optimizer's state: %w", err)
		}
	}
	if inner.Tensors != nil {
		if err := m.cfg.inner.LoadStateDict(inner); err != nil {
			if m.diloco {
				_ = m.outer.LoadStateDict(outerBefore) // its own state: loads back
			}
			return fmt.Errorf("localsgd: loading rank %d's inner optimizer state: %w", rank, err)
		}
	}
	for i, g := range m.globals {
		copy(g.Data(), globals[i])
	}
	for i, l := range locals {
		copy(m.params[i].Data(), l)
	}
	for _, f := range m.frags {
		f.pending = nil
		if pending[f.index] != nil {
			copy(f.send, pending[f.index])
			f.pending = &inflight{applyAt: applyAt[f.index], contributors: m.contributors, finished: true}
		}
	}
	m.step, m.gathered = step, nil
	return nil
}

// tensorCopy returns a copy of saved, which must have want's shape.
func tensorCopy(saved, want *tensor.Tensor, name string) (*tensor.Tensor, error) {
	if saved == nil {
		return nil, fmt.Errorf("localsgd: state: %s is missing", name)
	}
	if saved.Len() != want.Len() {
		return nil, fmt.Errorf("localsgd: state: %s has %d values, want %d", name, saved.Len(), want.Len())
	}
	return tensor.New(append([]float32(nil), saved.Data()...), want.Shape()...), nil
}
