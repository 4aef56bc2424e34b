package fsdp

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// optimKey is the piece key of a sharded optimizer buffer: the
// parameter's name instead of its index in one optimizer, so that the
// pieces load at any world size and into an optimizer whose groups list
// the shards in another order.
func optimKey(name, slot string) string { return "optim.state." + name + "." + slot }

var stateIndex = regexp.MustCompile(`^state\.(\d+)\.(.+)$`)

// OptimizerShardedState turns st, the StateDict of an optimizer over this
// model's shards, into pieces of the full parameters' optimizer buffers
// (key "optim.state.<parameter name>.<buffer>", the parameter's global
// shape, this rank's offset and real elements) and the optimizer's
// metadata, in which per-parameter entries name the parameter
// ("state.<parameter name>.step") instead of its index. params are the
// shards in the order the optimizer holds them (its constructor's, then
// each AddParamGroup's). Under HybridShard only the first node's ranks
// return pieces; metadata comes from every rank.
func (m *Model) OptimizerShardedState(st optim.State, params []*tensor.Tensor) ([]Piece, map[string]string, error) {
	names := make([]*param, len(params))
	for i, t := range params {
		p, ok := m.byShard[t]
		if !ok {
			return nil, nil, fmt.Errorf("fsdp: optimizer parameter %d is not a shard of this model", i)
		}
		names[i] = p
	}
	meta := map[string]string{}
	for k, v := range st.Meta {
		if sm := stateIndex.FindStringSubmatch(k); sm != nil {
			i, _ := strconv.Atoi(sm[1])
			if i >= len(names) {
				return nil, nil, fmt.Errorf("fsdp: optimizer state %s: the optimizer has only %d parameters", k, len(names))
			}
			k = "state." + names[i].name + "." + sm[2]
		}
		meta[k] = v
	}
	var pieces []Piece
	keys := make([]string, 0, len(st.Tensors))
	for k := range st.Tensors {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		sm := stateIndex.FindStringSubmatch(k)
		if sm == nil {
			return nil, nil, fmt.Errorf("fsdp: optimizer state tensor %s is not per parameter", k)
		}
		i, _ := strconv.Atoi(sm[1])
		if i >= len(names) {
			return nil, nil, fmt.Errorf("fsdp: optimizer state %s: the optimizer has only %d parameters", k, len(names))
		}
		p := names[i]
		off, n := m.span(p)
		if m.cfg.strategy == NoShard {
			off, n = 0, p.numel
		}
		if n == 0 || !m.writesPieces() || (m.cfg.strategy == NoShard && m.world.Rank() != 0) {
			continue
		}
		pieces = append(pieces, Piece{Key: optimKey(p.name, sm[2]), GlobalShape: slices.Clone(p.shape), Offset: off,
			Data: slices.Clone(st.Tensors[k].Data()[:n])})
	}
	return pieces, meta, nil
}

// LoadOptimizerShardedState loads into opt, an optimizer over this
// model's shards (params in its order, as for OptimizerShardedState),
// the pieces and metadata OptimizerShardedState returned on the ranks of
// any run, of any world size: each rank takes its shards' part of every
// buffer. It fails, leaving opt unchanged, when a buffer of a parameter
// with state is not covered or the optimizer refuses the state.
func (m *Model) LoadOptimizerShardedState(opt optim.Optimizer, params []*tensor.Tensor, pieces []Piece, meta map[string]string) error {
	index := map[string]int{}
	for i, t := range params {
		p, ok := m.byShard[t]
		if !ok {
			return fmt.Errorf("fsdp: optimizer parameter %d is not a shard of this model", i)
		}
		index[p.name] = i
	}
	// split cuts "<parameter name>.<rest>" at the longest parameter name.
	split := func(k string) (name, rest string, ok bool) {
		for n := range index {
			if len(n) > len(name) && strings.HasPrefix(k, n+".") && len(k) > len(n)+1 {
				name, rest, ok = n, k[len(n)+1:], true
			}
		}
		return name, rest, ok
	}
	slots := map[string][]string{} // parameter name → buffer names with pieces
	byKey := map[string][]Piece{}
	for _, pc := range pieces {
		if _, seen := byKey[pc.Key]; !seen {
			if name, slot, ok := split(strings.TrimPrefix(pc.Key, "optim.state.")); ok && strings.HasPrefix(pc.Key, "optim.state.") {
				slots[name] = append(slots[name], slot)
			}
		}
		byKey[pc.Key] = append(byKey[pc.Key], pc)
	}
	st := optim.State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{}}
	for k, v := range meta {
		if rest, ok := strings.CutPrefix(k, "state."); ok {
			name, field, ok := split(rest)
			if !ok {
				return fmt.Errorf("fsdp: optimizer state %s names no parameter of this model", k)
			}
			k = "state." + strconv.Itoa(index[name]) + "." + field
		}
		st.Meta[k] = v
	}
	for name, i := range index {
		p := m.byShard[params[i]]
		off, n := m.span(p)
		if m.cfg.strategy == NoShard {
			off, n = 0, p.numel
		}
		for _, slot := range slots[name] {
			data := make([]float32, p.shard.Len())
			covered := make([]bool, n)
			for _, pc := range byKey[optimKey(name, slot)] {
				if !slices.Equal(pc.GlobalShape, p.shape) {
					return fmt.Errorf("fsdp: optimizer state %s: the checkpoint's shape %v differs from the model's %v", pc.Key, pc.GlobalShape, p.shape)
				}
				a, b := max(off, pc.Offset), min(off+n, pc.Offset+len(pc.Data))
				for k := a; k < b; k++ {
					data[k-off] = pc.Data[k-pc.Offset]
					covered[k-off] = true
				}
			}
			if j := slices.Index(covered, false); j >= 0 {
				return fmt.Errorf("fsdp: optimizer state %s: element %d is in no piece of the checkpoint", optimKey(name, slot), off+j)
			}
			st.Tensors["state."+strconv.Itoa(i)+"."+slot] = tensor.New(data, p.shard.Shape()...)
		}
	}
	if err := opt.LoadStateDict(st); err != nil {
		return fmt.Errorf("fsdp: %w", err)
	}
	return nil
}
