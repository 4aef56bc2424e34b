package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/ddp/fsdp"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// The values of Config.Sharding.
const (
	ShardNone   = "none"
	ShardZero1  = "zero1"
	ShardZero2  = "zero2"
	ShardFull   = "full"
	ShardHybrid = "hybrid"
)

// checkSharding returns an error unless s is a Config.Sharding.
func checkSharding(s string) error {
	switch s {
	case "", ShardNone, ShardZero1, ShardZero2, ShardFull, ShardHybrid:
		return nil
	}
	return fmt.Errorf("Sharding %q: want none, zero1, zero2, full or hybrid", s)
}

// sharded reports whether c shards the training state.
func (c *Config) sharded() bool { return c.Sharding != "" && c.Sharding != ShardNone }

// syncEvery is the local-SGD or DiLoCo period, 0 for neither.
func (c *Config) syncEvery() int { return max(c.LocalSGD, c.DiLoCo) }

// ShardedDir is the directory of the sharded checkpoints of a run whose
// Config.Save is save: "run/gpt.safetensors" → "run/gpt.sharded".
func ShardedDir(save string) string {
	return strings.TrimSuffix(save, ".safetensors") + ".sharded"
}

// Sharding returns the run's sharding strategy as Config.Sharding names
// it, "" when the run does not shard (alone, or under DDP).
func (r *Run) Sharding() string {
	if r.fm == nil {
		return ""
	}
	return r.cfg.Sharding
}

// ParamDim returns the number of dimensions of the parameter p stands
// for: under sharding p is a flat shard and this is its full parameter's
// (fsdp.ShardInfo.Dim); otherwise p's own. Jobs group weight decay by it.
func (r *Run) ParamDim(p *tensor.Tensor) int {
	if r.fm != nil {
		if info, ok := r.fm.ShardOf(p); ok {
			return info.Dim()
		}
	}
	return p.Dim()
}

// DecayGroups splits params, the trained model's Parameters, into those
// of two or more dimensions (weight matrices and embeddings, by
// ParamDim) and the rest, as nanoGPT's configure_optimizers. The
// optimizer must hold them in this order, decay's group then other's: a
// sharded checkpoint names each parameter's optimizer state through it.
func (r *Run) DecayGroups(params []*tensor.Tensor) (decay, other []*tensor.Tensor) {
	for _, p := range params {
		if r.ParamDim(p) >= 2 {
			decay = append(decay, p)
		} else {
			other = append(other, p)
		}
	}
	r.optParams = append(append([]*tensor.Tensor(nil), decay...), other...)
	return decay, other
}

// ClipGradNorm scales the gradients of params, the trained model's
// Parameters, so that the whole model's gradient norm is at most max,
// and returns the norm before clipping: under sharding the norm is over
// every rank's shards (fsdp.Model.ClipGradNorm, a collective every rank
// calls), otherwise optim.ClipGradNorm's. Under fault tolerance the
// step's gradients are first averaged over its quorum, so that every
// replica clips the average, as DDP does.
func (r *Run) ClipGradNorm(ctx context.Context, params []*tensor.Tensor, max float64) (float64, error) {
	if r.ft != nil && r.ft.mgr != nil {
		r.ft.average(ctx)
	}
	if r.fm != nil {
		n, err := r.fm.ClipGradNorm(max)
		if err != nil {
			return 0, fmt.Errorf("harness: clipping the gradients: %w", err)
		}
		return n, nil
	}
	return optim.ClipGradNorm(params, max), nil
}

// wrapSharded wraps model in fsdp with the strategy of Config.Sharding.
func (r *Run) wrapSharded(ctx context.Context, model nn.Module) (Model, error) {
	s, err := fsdp.ParseStrategy(r.cfg.Sharding)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	opts := []fsdp.Option{fsdp.Strategy(s)}
	if s == fsdp.HybridShard {
		nodes, err := r.hybridNodes(ctx)
		if err != nil {
			return nil, err
		}
		opts = append(opts, fsdp.Nodes(nodes))
	}
	fm, err := fsdp.New(ctx, model, r.pg, opts...)
	if err != nil {
		return nil, fmt.Errorf("harness: sharding the model (%s): %w", r.cfg.Sharding, err)
	}
	r.fm, r.module, r.params = fm, model, fm.Parameters()
	tuneGCForSharding()
	return fm, nil
}

// hybridNodes returns the ranks of each node for hybrid sharding: the
// group's topology, ranks that share a host (distributed.Group.Nodes).
// Where every rank has GROUP_RANK, the node the launcher started it on,
// the layout it gives is compared with the hosts', and rank 0 warns when
// they differ (several launcher nodes on one host): sharding follows the
// hosts, so that parameter traffic never crosses the network.
func (r *Run) hybridNodes(ctx context.Context) ([][]int, error) {
	nodes := r.pg.Nodes()
	mine := []int64{-1}
	if v, ok := os.LookupEnv("GROUP_RANK"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("harness: hybrid sharding: GROUP_RANK=%q is not a node rank", v)
		}
		mine[0] = n
	}
	all := make([]int64, r.world)
	if err := r.pg.AllGather(ctx, all, mine); err != nil {
		return nil, fmt.Errorf("harness: hybrid sharding: gathering the ranks' GROUP_RANK: %w", err)
	}
	if r.rank != 0 {
		return nodes, nil
	}
	r.log.Info("harness: hybrid sharding", "nodes", nodesString(nodes), "shard_group", len(nodes[0]), "replicas", len(nodes))
	if !slices.Contains(all, -1) {
		if declared := nodesOf(all); !slices.EqualFunc(declared, nodes, slices.Equal) {
			r.log.Warn("harness: hybrid sharding: the launcher's nodes (GROUP_RANK) differ from the hosts the ranks run on; sharding within each host",
				"launcher_nodes", nodesString(declared), "hosts", nodesString(nodes))
		}
	}
	return nodes, nil
}

// nodesOf groups ranks by key, keys[r] being rank r's, as
// distributed.Group.Nodes orders them: nodes by their lowest rank.
func nodesOf(keys []int64) [][]int {
	var nodes [][]int
	index := map[int64]int{}
	for r, k := range keys {
		i, ok := index[k]
		if !ok {
			i = len(nodes)
			index[k] = i
			nodes = append(nodes, nil)
		}
		nodes[i] = append(nodes[i], r)
	}
	return nodes
}

// nodesString writes nodes for a log: "[0 1] [2 3]".
func nodesString(nodes [][]int) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, " ")
}

// shardedExtra keys of a sharded checkpoint's Extra.
const (
	extraOptimizer = "optimizer" // the optimizer's metadata, JSON
	extraScheduler = "scheduler" // the scheduler's state's metadata, JSON
	extraEpoch     = "epoch"
	extraStep      = "step"
	extraSidecar   = "sidecar" // the sampler's place and the program's Extra, JSON
)

// saveSharded writes a sharded checkpoint of l.State into
// ShardedDir(Config.Save): each rank its pieces of the model and of the
// optimizer's state, rank 0 the rest (counters, scheduler, sampler,
// Extra). Every rank calls it at the same step.
func (r *Run) saveSharded(ctx context.Context, l *Loop) error {
	st := checkpoint.ShardedState{Step: l.State.Step, Strategy: r.cfg.Sharding, Extra: map[string]string{}}
	for _, p := range r.fm.ShardedStateDict() {
		st.Pieces = append(st.Pieces, checkpoint.Piece(p))
	}
	op, meta, err := r.fm.OptimizerShardedState(l.State.Optimizer.StateDict(), r.optParams)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	for _, p := range op {
		st.Pieces = append(st.Pieces, checkpoint.Piece(p))
	}
	if err := putJSON(st.Extra, extraOptimizer, meta); err != nil {
		return err
	}
	if s := l.State.Scheduler; s != nil {
		ss := s.StateDict()
		if len(ss.Tensors) > 0 {
			return errors.New("harness: a sharded checkpoint holds a scheduler's metadata only, and this scheduler's state has tensors")
		}
		if err := putJSON(st.Extra, extraScheduler, ss.Meta); err != nil {
			return err
		}
	}
	st.Extra[extraEpoch] = strconv.Itoa(l.State.Epoch)
	st.Extra[extraStep] = strconv.FormatInt(l.State.Step, 10)
	sc, err := r.sidecarOf(l)
	if err != nil {
		return err
	}
	if err := putJSON(st.Extra, extraSidecar, sc); err != nil {
		return err
	}
	if err := checkpoint.SaveSharded(ctx, r.pg, ShardedDir(r.cfg.Save), st); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

func putJSON(m map[string]string, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("harness: encoding the checkpoint's %s: %w", key, err)
	}
	m[key] = string(b)
	return nil
}

// finishSharded has rank 0 write the model to Config.Save as the model
// file Save writes (safetensors, loadable by PyTorch), from the units
// gathered one at a time, each written as it arrives: beside its shards
// a rank holds one unit's full parameters. Every rank calls it.
func (r *Run) finishSharded(ctx context.Context) error {
	if r.cfg.Save == "" {
		return nil
	}
	tensor.ReleasePool() // its buffers, collected with fsdp's, make room for a unit
	var w *checkpoint.ModelWriter
	var err error
	if r.rank == 0 {
		w, err = checkpoint.CreateModel(r.cfg.Save, r.module)
	}
	// Every rank takes part in every gather, even when rank 0 cannot
	// write: the group stays in step, and rank 0 reports why.
	gerr := r.fm.FullParamsOn(ctx, 0, func(_ string, t *tensor.Tensor) error {
		if err != nil {
			return err
		}
		return w.Write(t)
	})
	if r.rank != 0 {
		if gerr != nil {
			return fmt.Errorf("harness: gathering the model to save: %w", gerr)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if gerr != nil {
		w.Abort()
		return fmt.Errorf("harness: saving the model: %w", gerr)
	}
	// What fsdp does not shard (buffers, frozen parameters) is whole on
	// every rank.
	for _, t := range w.Pending() {
		if err := w.Write(t); err != nil {
			w.Abort()
			return fmt.Errorf("harness: %w", err)
		}
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// Kinds of checkpoint Resume loads.
const (
	noCheckpoint int64 = iota
	trainingCheckpoint
	shardedCheckpoint
)

// newestCheckpoint is the kind of rank 0's newest checkpoint: the
// training checkpoint beside Config.Save or the sharded one in
// ShardedDir, whichever rank 0 wrote last. Every rank calls it and gets
// rank 0's answer.
func (r *Run) newestCheckpoint(ctx context.Context) (int64, error) {
	kind := []int64{noCheckpoint}
	if r.rank == 0 {
		tr, terr := os.Stat(checkpoint.TrainingPath(r.cfg.Save))
		sh, serr := os.Stat(filepath.Join(ShardedDir(r.cfg.Save), checkpoint.LatestFile))
		switch {
		case serr == nil && (terr != nil || sh.ModTime().After(tr.ModTime())):
			kind[0] = shardedCheckpoint
		case terr == nil:
			kind[0] = trainingCheckpoint
		}
	}
	if r.pg != nil {
		if err := r.pg.Broadcast(ctx, kind, 0); err != nil {
			return 0, fmt.Errorf("harness: resuming: hearing rank 0's checkpoint: %w", err)
		}
	}
	return kind[0], nil
}

// broadcastJSON sends rank 0's v (JSON, or its error) to every rank,
// which decodes it into v.
func (r *Run) broadcastJSON(ctx context.Context, v any, rootErr error) error {
	var b []byte
	n := []int64{-1}
	if r.rank == 0 && rootErr == nil {
		var err error
		if b, err = json.Marshal(v); err != nil {
			rootErr = err
		} else {
			n[0] = int64(len(b))
		}
	}
	if r.pg == nil {
		return rootErr
	}
	if err := r.pg.Broadcast(ctx, n, 0); err != nil {
		return err
	}
	if n[0] < 0 {
		if rootErr != nil {
			return rootErr
		}
		return errors.New("rank 0 could not read it")
	}
	w := make([]int32, n[0])
	for i, c := range b {
		w[i] = int32(c)
	}
	if err := r.pg.Broadcast(ctx, w, 0); err != nil {
		return err
	}
	if r.rank == 0 {
		return nil
	}
	b = make([]byte, n[0])
	for i, c := range w {
		b[i] = byte(c)
	}
	return json.Unmarshal(b, v)
}

// resumeSharded loads the newest sharded checkpoint into l, whatever
// world size and strategy saved it, under sharding or DDP: the model
// whole on every rank (fsdp re-cuts its shards from it), the optimizer's
// state as this rank's ranges of it.
func (r *Run) resumeSharded(ctx context.Context, l *Loop) (*sidecar, error) {
	dir := ShardedDir(r.cfg.Save)
	var shapes map[string][]int
	var rootErr error
	if r.rank == 0 {
		info, err := checkpoint.InspectSharded(dir)
		if err != nil {
			rootErr = err
		} else {
			shapes = map[string][]int{}
			for k, t := range info.Index.Tensors {
				shapes[k] = t.Shape
			}
		}
	}
	if err := r.broadcastJSON(ctx, &shapes, rootErr); err != nil {
		return nil, fmt.Errorf("harness: resuming from %s: %w", dir, err)
	}
	module := l.State.Model
	named := nn.NamedParameters(module)
	names := map[*tensor.Tensor]string{}
	for _, np := range named {
		names[np.Tensor] = np.Name
	}
	// span is the range of parameter name this rank keeps state of.
	type span struct{ off, n int }
	spans := map[string]span{}
	for _, p := range r.optParams {
		if r.fm != nil {
			info, _ := r.fm.ShardOf(p)
			spans[info.Name] = span{info.Offset, info.Len}
		} else {
			spans[names[p]] = span{0, p.Len()}
		}
	}
	var want []checkpoint.PieceRequest
	var unknown []string
	for _, key := range slices.Sorted(maps.Keys(shapes)) {
		shape := shapes[key]
		numel := 1
		for _, d := range shape {
			numel *= d
		}
		rest, isOptim := strings.CutPrefix(key, "optim.state.")
		if !isOptim {
			want = append(want, checkpoint.PieceRequest{Key: key, GlobalShape: shape, Length: numel})
			continue
		}
		name := ""
		for n := range spans {
			if len(n) > len(name) && strings.HasPrefix(rest, n+".") {
				name = n
			}
		}
		sp, ok := spans[name]
		if !ok {
			unknown = append(unknown, key)
			continue
		}
		if sp.n > 0 {
			want = append(want, checkpoint.PieceRequest{Key: key, GlobalShape: shape, Offset: sp.off, Length: sp.n})
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("harness: resuming from %s: optimizer state of no parameter of this model: %s", dir, strings.Join(unknown, ", "))
	}
	ld, err := checkpoint.LoadSharded(ctx, r.pg, dir, want)
	if err != nil {
		return nil, fmt.Errorf("harness: resuming: %w", err)
	}
	full := map[string]*tensor.Tensor{}
	var optPieces []fsdp.Piece
	for _, pc := range ld.Pieces {
		if checkpoint.IsModelKey(pc.Key) {
			full[pc.Key] = tensor.New(pc.Data, pc.GlobalShape...)
		} else {
			optPieces = append(optPieces, fsdp.Piece(pc))
		}
	}
	// Tied weights are saved once, under their parameter's name.
	sd := map[string]*tensor.Tensor{}
	for _, e := range nn.StateDict(module) {
		if n, ok := names[e.Tensor]; ok && full[n] != nil {
			sd[e.Name] = full[n]
		} else if t := full[e.Name]; t != nil {
			sd[e.Name] = t
		}
	}
	var meta map[string]string
	if err := json.Unmarshal([]byte(ld.Extra[extraOptimizer]), &meta); err != nil {
		return nil, fmt.Errorf("harness: resuming from %s: the optimizer's metadata: %w", ld.Dir, err)
	}
	if r.fm != nil {
		if err := r.fm.LoadFullStateDict(sd, true); err != nil {
			return nil, fmt.Errorf("harness: resuming from %s: %w", ld.Dir, err)
		}
		if err := r.fm.LoadOptimizerShardedState(l.State.Optimizer, r.optParams, optPieces, meta); err != nil {
			return nil, fmt.Errorf("harness: resuming from %s: %w", ld.Dir, err)
		}
	} else {
		if err := nn.LoadStateDict(module, sd, true); err != nil {
			return nil, fmt.Errorf("harness: resuming from %s: %w", ld.Dir, err)
		}
		st, err := wholeOptimizerState(r.optParams, names, optPieces, meta)
		if err != nil {
			return nil, fmt.Errorf("harness: resuming from %s: %w", ld.Dir, err)
		}
		if err := l.State.Optimizer.LoadStateDict(st); err != nil {
			return nil, fmt.Errorf("harness: resuming the optimizer from %s: %w", ld.Dir, err)
		}
	}
	if s := l.State.Scheduler; s != nil {
		var sm map[string]string
		if err := json.Unmarshal([]byte(ld.Extra[extraScheduler]), &sm); err != nil {
			return nil, fmt.Errorf("harness: resuming from %s: the scheduler's state: %w", ld.Dir, err)
		}
		if err := s.LoadStateDict(optim.State{Meta: sm}); err != nil {
			return nil, fmt.Errorf("harness: resuming the scheduler from %s: %w", ld.Dir, err)
		}
	}
	epoch, err1 := strconv.Atoi(ld.Extra[extraEpoch])
	step, err2 := strconv.ParseInt(ld.Extra[extraStep], 10, 64)
	sc := &sidecar{}
	err3 := json.Unmarshal([]byte(ld.Extra[extraSidecar]), sc)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("harness: resuming from %s: the counters and the sampler: %w", ld.Dir, err)
	}
	l.State.Epoch, l.State.Step = epoch, step
	return sc, nil
}

// wholeOptimizerState turns the whole tensors of a sharded checkpoint's
// optimizer state (keys "optim.state.<parameter name>.<buffer>", metadata
// "state.<parameter name>.<field>") into the state dict of an optimizer
// over params, which names a parameter by its place in params.
func wholeOptimizerState(params []*tensor.Tensor, names map[*tensor.Tensor]string, pieces []fsdp.Piece, meta map[string]string) (optim.State, error) {
	index := map[string]int{}
	for i, p := range params {
		index[names[p]] = i
	}
	split := func(k string) (string, string, bool) {
		name := ""
		for n := range index {
			if len(n) > len(name) && strings.HasPrefix(k, n+".") {
				name = n
			}
		}
		return name, strings.TrimPrefix(k, name+"."), name != ""
	}
	st := optim.State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{}}
	for k, v := range meta {
		if rest, ok := strings.CutPrefix(k, "state."); ok {
			name, field, ok := split(rest)
			if !ok {
				return st, fmt.Errorf("optimizer state %s names no parameter of this model", k)
			}
			k = "state." + strconv.Itoa(index[name]) + "." + field
		}
		st.Meta[k] = v
	}
	for _, pc := range pieces {
		name, slot, ok := split(strings.TrimPrefix(pc.Key, "optim.state."))
		if !ok {
			return st, fmt.Errorf("optimizer state %s names no parameter of this model", pc.Key)
		}
		p := params[index[name]]
		if !slices.Equal(pc.GlobalShape, p.Shape()) {
			return st, fmt.Errorf("optimizer state %s: the checkpoint's shape %v differs from the model's %v", pc.Key, pc.GlobalShape, p.Shape())
		}
		st.Tensors["state."+strconv.Itoa(index[name])+"."+slot] = tensor.New(pc.Data, pc.GlobalShape...)
	}
	return st, nil
}

// gatherRSS collects every rank's peak RSS in MiB for the summary.
func (r *Run) gatherRSS(ctx context.Context) error {
	mine := []int64{int64(peakRSSMiB() + 0.5)}
	if r.pg == nil {
		r.rss = mine
		return nil
	}
	all := make([]int64, r.world)
	if err := r.pg.AllGather(ctx, all, mine); err != nil {
		return fmt.Errorf("harness: gathering the ranks' peak RSS: %w", err)
	}
	r.rss = all
	return nil
}
