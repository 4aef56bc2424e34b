package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/ddp/fsdp"
	"github.com/gotrain/gotrain/optim"
)

// optimIndex matches a per-parameter key of an optimizer's state dict:
// the parameter's place in the optimizer, then the buffer or field.
var optimIndex = regexp.MustCompile(`^state\.(\d+)\.(.+)$`)

// resumeFromDDP loads rank 0's DDP training checkpoint (Config.Save's)
// into a sharded run: every rank receives it from rank 0 and keeps its
// shards of the model and of the optimizer's state. The optimizer that
// saved it held the parameters in the order this run's does (both
// DecayGroups' over the module's parameters), which names each
// parameter's state; the shapes are checked. It returns nil when rank 0
// has no checkpoint.
func (r *Run) resumeFromDDP(ctx context.Context, l *Loop) (*sidecar, error) {
	var g checkpoint.Group // a nil *distributed.Group would not be a nil Group
	if r.pg != nil {
		g = r.pg
	}
	path := checkpoint.TrainingPath(r.cfg.Save)
	tc, found, err := checkpoint.ReadTrainingFrom(ctx, g, r.cfg.Save)
	if err != nil {
		return nil, fmt.Errorf("harness: resuming: %w", err)
	}
	if !found {
		return nil, nil
	}
	if err := r.fm.LoadFullStateDict(tc.Model, true); err != nil {
		return nil, fmt.Errorf("harness: resuming from %s: the model does not match the saved one: %w", path, err)
	}
	pieces, meta, err := r.shardOptimizerState(tc.Optimizer)
	if err != nil {
		return nil, fmt.Errorf("harness: resuming the optimizer from %s: %w", path, err)
	}
	if err := r.fm.LoadOptimizerShardedState(l.State.Optimizer, r.optParams, pieces, meta); err != nil {
		return nil, fmt.Errorf("harness: resuming the optimizer from %s: %w", path, err)
	}
	if s := l.State.Scheduler; s != nil || len(tc.Scheduler) > 0 {
		if s == nil {
			return nil, fmt.Errorf("harness: resuming from %s: it holds a scheduler's state and the run has no scheduler", path)
		}
		if len(tc.Scheduler) == 0 {
			return nil, fmt.Errorf("harness: resuming from %s: it holds no scheduler's state and the run has a scheduler", path)
		}
		if err := s.LoadStateDict(optim.State{Meta: tc.Scheduler}); err != nil {
			return nil, fmt.Errorf("harness: resuming the scheduler from %s: %w", path, err)
		}
	}
	sc := &sidecar{}
	if err := json.Unmarshal(tc.Extra, sc); err != nil {
		return nil, fmt.Errorf("harness: resuming from %s: the sampler and Extra: %w", path, err)
	}
	l.State.Epoch, l.State.Step = tc.Epoch, tc.Step
	return sc, nil
}

// shardOptimizerState turns the state dict of the DDP run's optimizer,
// whose per-parameter entries are by the parameter's place in it, into
// the pieces and metadata of a sharded checkpoint, which name the
// parameter (fsdp.Model.OptimizerShardedState's form), whole: each rank
// keeps its shard of them.
func (r *Run) shardOptimizerState(st optim.State) ([]fsdp.Piece, map[string]string, error) {
	names := make([]string, len(r.optParams))
	for i, p := range r.optParams {
		info, ok := r.fm.ShardOf(p)
		if !ok {
			return nil, nil, fmt.Errorf("optimizer parameter %d is not a shard of the model", i)
		}
		names[i] = info.Name
	}
	param := func(k string) (name, rest string, err error) {
		sm := optimIndex.FindStringSubmatch(k)
		if sm == nil {
			return "", "", nil
		}
		i, err := strconv.Atoi(sm[1])
		if err != nil || i >= len(names) {
			return "", "", fmt.Errorf("%s is the state of parameter %s, and the run's optimizer has %d parameters", k, sm[1], len(names))
		}
		return names[i], sm[2], nil
	}
	meta := map[string]string{}
	for k, v := range st.Meta {
		name, field, err := param(k)
		if err != nil {
			return nil, nil, err
		}
		if name != "" {
			k = "state." + name + "." + field
		}
		meta[k] = v
	}
	var pieces []fsdp.Piece
	for k, t := range st.Tensors {
		name, slot, err := param(k)
		if err != nil {
			return nil, nil, err
		}
		if name == "" {
			return nil, nil, fmt.Errorf("optimizer state %s is not a parameter's", k)
		}
		pieces = append(pieces, fsdp.Piece{Key: "optim.state." + name + "." + slot, GlobalShape: t.Shape(), Data: t.Data()})
	}
	return pieces, meta, nil
}
