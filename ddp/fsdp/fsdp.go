package fsdp

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/tensor"
)

// ShardingStrategy says what each rank keeps of the parameters, gradients
// and optimizer state, with PyTorch's FSDP names.
type ShardingStrategy int

const (
	// NoShard replicates everything: DistributedDataParallel's semantics
	// (gradients allreduce-averaged per unit).
	NoShard ShardingStrategy = iota
	// ShardOptimizer ("zero1") keeps full parameters on every rank, but
	// each rank updates, and holds optimizer state for, only its slice of
	// every parameter: gradients are allreduced, parameters all-gathered
	// before the next forward pass.
	ShardOptimizer
	// ShardGradOp ("zero2", PyTorch's SHARD_GRAD_OP) is ShardOptimizer with
	// gradients reduce-scattered, so each rank receives only its slice.
	ShardGradOp
	// FullShard ("full", FULL_SHARD, ZeRO-3) is ShardGradOp with the
	// parameters themselves sharded at rest: each unit is gathered just
	// before its forward and freed after it, gathered again for its
	// backward, and its full parameters and gradients are freed as soon
	// as its gradients are reduced.
	FullShard
	// HybridShard ("hybrid", HYBRID_SHARD) is FullShard within each node's
	// ranks, with the shards' gradients allreduced across nodes: parameter
	// traffic stays inside a node.
	HybridShard
)

var strategyNames = [...]string{"no_shard", "zero1", "zero2", "full", "hybrid"}

// String returns the strategy's short name: no_shard, zero1, zero2, full
// or hybrid.
func (s ShardingStrategy) String() string {
	if s >= 0 && int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("ShardingStrategy(%d)", int(s))
}

// ParseStrategy reads a strategy by its short name (no_shard, zero1,
// zero2, full, hybrid), its PyTorch name (NO_SHARD, SHARD_GRAD_OP,
// FULL_SHARD, HYBRID_SHARD) or zero3.
func ParseStrategy(name string) (ShardingStrategy, error) {
	switch strings.ToLower(name) {
	case "no_shard", "noshard", "ddp":
		return NoShard, nil
	case "zero1", "shard_optimizer":
		return ShardOptimizer, nil
	case "zero2", "shard_grad_op":
		return ShardGradOp, nil
	case "full", "full_shard", "zero3":
		return FullShard, nil
	case "hybrid", "hybrid_shard":
		return HybridShard, nil
	}
	return 0, fmt.Errorf("fsdp: unknown sharding strategy %q (want no_shard, zero1, zero2, full or hybrid)", name)
}

// Option configures New.
type Option func(*config)

type config struct {
	strategy         ShardingStrategy
	units            []nn.Module
	prefetch         bool
	nodes            [][]int
	broadcastBuffers bool
	mixed            MixedPrecisionPolicy
}

// Strategy sets the sharding strategy (default FullShard).
func Strategy(s ShardingStrategy) Option { return func(c *config) { c.strategy = s } }

// Units sets the submodules whose parameters are gathered, reduced and
// freed together (FSDP's wrapped modules). Each parameter belongs to the
// smallest listed unit containing it; list the model itself to cover the
// parameters of no other unit. Default: for a models.GPTModel each
// transformer block plus the model for the rest, for any other module the
// whole module as one unit.
func Units(units ...nn.Module) Option {
	return func(c *config) { c.units = append([]nn.Module(nil), units...) }
}

// Prefetch starts a unit's gather before it is needed, so that the
// transfer overlaps computation: with FullShard and HybridShard the next
// unit's while a unit runs forward or backward, with ShardOptimizer and
// ShardGradOp all units' at once at the start of Forward. Without it each
// unit is gathered when needed, one at a time. On by default.
func Prefetch(on bool) Option { return func(c *config) { c.prefetch = on } }

// Nodes sets the ranks of each node for HybridShard instead of the
// group's topology (distributed.Group.Nodes): every rank exactly once,
// the same number on every node.
func Nodes(nodes [][]int) Option {
	return func(c *config) {
		c.nodes = make([][]int, len(nodes))
		for i, n := range nodes {
			c.nodes[i] = append([]int(nil), n...)
		}
	}
}

// BroadcastBuffers makes every Forward first copy rank 0's buffers (such
// as BatchNorm running statistics) to all ranks, as DDP does. On by
// default.
func BroadcastBuffers(on bool) Option { return func(c *config) { c.broadcastBuffers = on } }

// param is one parameter of the module and its local shard.
type param struct {
	name  string
	t     *tensor.Tensor // the module's parameter: full values while gathered
	shape []int
	numel int
	chunk int            // elements per shard rank (numel padded to a multiple of the shard group)
	shard *tensor.Tensor // this rank's elements [rank·chunk, (rank+1)·chunk), zero-padded
	unit  int
	off   int // offset of its chunk in its unit's per-rank block
	ready bool
	// pooledGrad says t's gradient storage came from m.bufs (pooledGrads),
	// and goes back there once reduced; a gradient backward allocated
	// itself is left to the collector, so that the pool holds no more
	// than one step takes out of it.
	pooledGrad bool
}

// unit is the parameters communicated together.
type unit struct {
	name    string
	mod     nn.Module
	root    bool // the wrapped module itself: gathered for the whole step
	params  []int
	block   int // elements per rank: the sum of its parameters' chunks
	pending int // parameters whose gradient is not final in this pass

	gather *gathering // its all-gather in flight, if any
	full   bool       // its parameters hold the gathered values
}

// reduction is one unit's gradient collective in flight.
type reduction struct {
	unit       int
	work       *distributed.Work
	send, recv []float32
	pooled     bool   // send is m.bufs', and so is recv, separately unless recvInSend
	recvInSend bool   // recv is this rank's block of send (an allreduce's result)
	decode     func() // with bf16 reduction: turns what arrived into recv
	bytes      int    // of send, for errors: reclaimSends may have given it back
	applied    bool   // its gradients are in the shards
}

// maxReducing is how many units' reduce-scatters may hold their send
// buffer, a full-size copy of the unit's gradients, at once: when
// backward outruns the network, launching another waits for the oldest,
// so that a pass holds two units' full gradients rather than the whole
// model's.
const maxReducing = 2

// Model is a module wrapped for sharded data-parallel training. Its
// Parameters are this rank's shards, which the optimizer updates; Forward
// gathers the full parameters, and Backward leaves each shard's averaged
// gradient slice in the shard's Grad.
type Model struct {
	module  nn.Module
	world   *distributed.Group
	shardG  *distributed.Group // the ranks that split each parameter
	replG   *distributed.Group // HybridShard across nodes: the ranks holding the same shards; nil otherwise
	cfg     config
	ns, sr  int // shard group size and this rank in it
	params  []*param
	units   []*unit
	order   []int // the order unit reductions are launched in: the same on every rank
	buffers []*tensor.Tensor
	byShard map[*tensor.Tensor]*param

	ctx      context.Context
	cancel   context.CancelFunc
	removers []func()

	perUnit    bool  // this Forward gathers each non-root unit around its own Forward
	evaluating bool  // inside Evaluate: forward passes follow one another
	fwdSeq     []int // the units in the order this Forward ran them
	prevSeq    []int // fwdSeq of the Forward before
	fwdErr     error // a gather failure inside this Forward's hooks
	fwdStack   []int // fwdSeq positions of the units whose Forward is running
	peak       int64 // the most gatheredBytes has been since New or ResetPeak

	pass     *tensor.Pass
	next     int
	inflight []reduction
	bufs     buffers // communication buffers for reuse
	noSync   bool
	deferred error

	join      *ddp.Joiner  // the Join m was last attached to
	joinStep  func() error // see SetJoinStep
	joinScale float32      // inside a Join: the factor for this pass's averaged gradients
	root      int          // the rank whose buffers Forward copies: 0, or in a Join the last active rank
}

// New wraps module for sharded data-parallel training over g. Every rank
// must call it with the same model, strategy and units: the ranks exchange
// them and each fails, naming both sides, when any differ. Rank 0's
// parameters and buffers are copied to all ranks, then each rank keeps its
// shard (and, with FullShard and HybridShard, releases the full values).
// ctx bounds every collective of the model's lifetime; Close ends them.
func New(ctx context.Context, module nn.Module, g *distributed.Group, opts ...Option) (*Model, error) {
	if module == nil || g == nil {
		return nil, errors.New("fsdp: New needs a module and a group")
	}
	cfg := config{strategy: FullShard, prefetch: true, broadcastBuffers: true}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.strategy < NoShard || cfg.strategy > HybridShard {
		return nil, fmt.Errorf("fsdp: unknown sharding strategy %d", int(cfg.strategy))
	}
	if err := checkMixed(cfg.mixed); err != nil {
		return nil, err
	}
	if cfg.strategy == HybridShard {
		if cfg.nodes == nil {
			cfg.nodes = g.Nodes()
		}
		if err := checkNodes(cfg.nodes, g.Size()); err != nil {
			return nil, err
		}
	}
	m := &Model{module: module, world: g, shardG: g, cfg: cfg, byShard: map[*tensor.Tensor]*param{}}
	for _, np := range nn.NamedParameters(module) {
		if !np.Tensor.RequiresGrad() {
			continue
		}
		t := np.Tensor
		m.params = append(m.params, &param{name: np.Name, t: t, shape: append([]int(nil), t.Shape()...), numel: t.Len()})
	}
	for _, nb := range nn.NamedBuffers(module) {
		m.buffers = append(m.buffers, nb.Tensor)
	}
	if err := m.assignUnits(); err != nil {
		return nil, err
	}
	if err := verifyAgreement(ctx, g, m.describe()); err != nil {
		return nil, err
	}
	if g.Size() > 1 {
		full := make([]*tensor.Tensor, 0, len(m.params)+len(m.buffers))
		for _, p := range m.params {
			full = append(full, p.t)
		}
		if err := broadcastTensors(ctx, g, append(full, m.buffers...), 0); err != nil {
			return nil, fmt.Errorf("fsdp: copying rank 0's parameters: %w", err)
		}
	}
	if cfg.strategy == HybridShard {
		if err := m.hybridGroups(ctx); err != nil {
			return nil, err
		}
	}
	m.ns, m.sr = m.shardG.Size(), m.shardG.Rank()
	if cfg.strategy == NoShard {
		m.ns, m.sr = 1, 0
	}
	m.shardParams()
	m.ctx, m.cancel = context.WithCancel(ctx)
	for i, p := range m.params {
		m.removers = append(m.removers, p.t.AddGradHook(func(pass *tensor.Pass, _ *tensor.Tensor) { m.gradReady(pass, i) }))
	}
	if m.releases() || cfg.strategy == ShardGradOp {
		m.installUnitHooks()
	}
	if cfg.strategy != NoShard {
		// The full values sharding let go of are most of what the heap
		// held: give their pages back now rather than when the
		// scavenger gets to them.
		debug.FreeOSMemory()
	}
	return m, nil
}

// assignUnits puts each parameter in the smallest unit containing it.
func (m *Model) assignUnits() error {
	units := m.cfg.units
	if units == nil {
		if gm, ok := m.module.(*models.GPTModel); ok {
			for _, b := range gm.Blocks {
				units = append(units, b)
			}
		}
		units = append(units, m.module)
	}
	names := map[nn.Module]string{}
	for _, nm := range nn.NamedModules(m.module) {
		if _, ok := names[nm.Module]; !ok {
			names[nm.Module] = nm.Name
		}
	}
	index := map[*tensor.Tensor]int{}
	for i, p := range m.params {
		index[p.t] = i
		p.unit = -1
	}
	size := make([]int, len(units))
	for u, mod := range units {
		if mod == nil {
			return fmt.Errorf("fsdp: unit %d is nil", u)
		}
		name, ok := names[mod]
		if !ok {
			return fmt.Errorf("fsdp: unit %d (%T) is not a submodule of the model", u, mod)
		}
		if name == "" {
			name = "(root)"
		}
		m.units = append(m.units, &unit{name: name, mod: mod, root: mod == m.module})
		for _, t := range nn.Parameters(mod) {
			size[u] += t.Len()
		}
	}
	for u, mod := range units {
		for _, t := range nn.Parameters(mod) {
			i, ok := index[t]
			if !ok {
				continue
			}
			if p := m.params[i]; p.unit < 0 || size[u] < size[p.unit] {
				p.unit = u
			}
		}
	}
	var missing []string
	for _, p := range m.params {
		if p.unit < 0 {
			missing = append(missing, p.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("fsdp: parameters covered by no unit: %s (list the model itself as a unit to cover the rest)", strings.Join(missing, ", "))
	}
	for i, p := range m.params {
		m.units[p.unit].params = append(m.units[p.unit].params, i)
	}
	// Reductions launch in reverse unit order, the root last, roughly the
	// order in which backward finishes the units (the root holds the
	// embeddings, whose gradients are final last), and in the same order
	// on every rank.
	for _, root := range []bool{false, true} {
		for u := len(m.units) - 1; u >= 0; u-- {
			if len(m.units[u].params) > 0 && m.units[u].root == root {
				m.order = append(m.order, u)
			}
		}
	}
	return nil
}

// checkNodes checks a HybridShard node layout: each rank on one node,
// every node with as many ranks.
func checkNodes(nodes [][]int, size int) error {
	if len(nodes) == 0 {
		return fmt.Errorf("fsdp: hybrid sharding: no nodes")
	}
	seen := make([]bool, size)
	for i, n := range nodes {
		if len(n) != len(nodes[0]) || len(n) == 0 {
			return fmt.Errorf("fsdp: hybrid sharding needs the same number of ranks on every node: node %d has %d, node 0 has %d (nodes %v)", i, len(n), len(nodes[0]), nodes)
		}
		for _, r := range n {
			if r < 0 || r >= size || seen[r] {
				return fmt.Errorf("fsdp: hybrid sharding: nodes %v do not list each of ranks 0..%d once", nodes, size-1)
			}
			seen[r] = true
		}
	}
	for r, ok := range seen {
		if !ok {
			return fmt.Errorf("fsdp: hybrid sharding: rank %d is on no node of %v", r, nodes)
		}
	}
	return nil
}

// hybridGroups makes the node groups (the shard groups) and the groups of
// ranks at the same position on each node (the replica groups).
func (m *Model) hybridGroups(ctx context.Context) error {
	g := m.world
	nodes := m.cfg.nodes
	per := len(nodes[0])
	// Every rank creates every group, in the same order.
	for _, n := range nodes {
		sub, err := g.NewGroup(ctx, n)
		if errors.Is(err, distributed.ErrNotMember) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fsdp: making the node group %v: %w", n, err)
		}
		m.shardG = sub
	}
	if len(nodes) < 2 {
		return nil
	}
	for j := 0; j < per; j++ {
		var ranks []int
		for _, n := range nodes {
			ranks = append(ranks, n[j])
		}
		sub, err := g.NewGroup(ctx, ranks)
		if errors.Is(err, distributed.ErrNotMember) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fsdp: making the replica group %v: %w", ranks, err)
		}
		m.replG = sub
	}
	return nil
}

// shardParams cuts each parameter into its shard and lays out the units.
func (m *Model) shardParams() {
	for _, u := range m.units {
		u.block = 0
		for _, i := range u.params {
			p := m.params[i]
			p.chunk = (p.numel + m.ns - 1) / m.ns
			p.off = u.block
			u.block += p.chunk
		}
	}
	for _, p := range m.params {
		if m.cfg.strategy == NoShard {
			p.shard = p.t
		} else {
			p.shard = tensor.New(make([]float32, p.chunk), p.chunk).SetRequiresGrad(true)
			m.copyToShard(p)
		}
		m.byShard[p.shard] = p
		if m.releases() {
			p.t.SetData(nil)
		}
	}
}

// copyToShard copies this rank's elements of p's full values into its shard.
func (m *Model) copyToShard(p *param) {
	if p.shard == p.t {
		return
	}
	d := p.shard.Data()
	clear(d)
	lo := m.sr * p.chunk
	if lo < p.numel {
		copy(d, p.t.Data()[lo:min(lo+p.chunk, p.numel)])
	}
}

// releases reports whether full parameters are freed between steps.
func (m *Model) releases() bool {
	return m.cfg.strategy == FullShard || m.cfg.strategy == HybridShard
}

// Module returns the wrapped module. With FullShard and HybridShard its
// parameters hold no values between steps: use FullStateDict to save it.
func (m *Model) Module() nn.Module { return m.module }

// Strategy returns the sharding strategy.
func (m *Model) Strategy() ShardingStrategy { return m.cfg.strategy }

// Parameters returns this rank's shards, in the module's parameter order,
// for the optimizer. With NoShard they are the module's parameters.
func (m *Model) Parameters() []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(m.params))
	for i, p := range m.params {
		out[i] = p.shard
	}
	return out
}

// NamedShards returns this rank's shards under their parameters' names.
func (m *Model) NamedShards() []nn.Named {
	out := make([]nn.Named, len(m.params))
	for i, p := range m.params {
		out[i] = nn.Named{Name: p.name, Tensor: p.shard}
	}
	return out
}

// ShardInfo describes the parameter a shard belongs to.
type ShardInfo struct {
	// Name is the parameter's state-dict name.
	Name string
	// Shape is the full parameter's shape.
	Shape []int
	// Offset is the index of the shard's first element in the flattened
	// parameter; Len is how many of its elements are real (the rest pad
	// the last shard to the common size).
	Offset, Len int
	// Unit names the unit the parameter is communicated with.
	Unit string
}

// Dim returns the full parameter's number of dimensions: optimizers put
// parameters of two or more in the weight-decay group.
func (s ShardInfo) Dim() int { return len(s.Shape) }

// ShardOf describes shard, one of Parameters; false if it is none of them.
func (m *Model) ShardOf(shard *tensor.Tensor) (ShardInfo, bool) {
	p, ok := m.byShard[shard]
	if !ok {
		return ShardInfo{}, false
	}
	off, n := m.span(p)
	return ShardInfo{Name: p.name, Shape: append([]int(nil), p.shape...), Offset: off, Len: n, Unit: m.units[p.unit].name}, true
}

// span returns the flat offset and the number of real elements of this
// rank's shard of p.
func (m *Model) span(p *param) (off, n int) {
	off = m.sr * p.chunk
	n = max(0, min(p.chunk, p.numel-off))
	return min(off, p.numel), n
}

// Forward gathers the full parameters (and, with BroadcastBuffers, copies
// rank 0's buffers) and runs the wrapped module. With FullShard and
// HybridShard only the root unit is gathered for the whole pass; every
// other unit is gathered just before its own Forward and freed right after
// it (see the package doc). A failure of those collectives leaves the
// module without parameters to run on, and Forward returns no error: it
// panics with a message starting "fsdp:". Use ForwardErr to get the error
// instead.
func (m *Model) Forward(x *tensor.Tensor) *tensor.Tensor {
	y, err := m.ForwardErr(x)
	if err != nil {
		panic(err.Error())
	}
	return y
}

// ForwardErr is Forward returning the collectives' error.
func (m *Model) ForwardErr(x *tensor.Tensor) (*tensor.Tensor, error) {
	if m.evaluating {
		return m.module.Forward(x), m.fwdErr // Evaluate gathers the units
	}
	if m.join != nil {
		if err := m.notifyJoin(); err != nil {
			return nil, err
		}
	}
	if m.cfg.broadcastBuffers && len(m.buffers) > 0 && m.world.Size() > 1 {
		if err := broadcastTensors(m.ctx, m.world, m.buffers, m.root); err != nil {
			return nil, fmt.Errorf("fsdp: broadcasting buffers in forward: %w", err)
		}
	}
	// A rank that joined shadows one gather of every unit (joinHook), so
	// inside a running Join the others gather every unit up front too.
	if m.releases() && (m.join == nil || !m.join.Running()) {
		return m.forwardPerUnit(x)
	}
	if err := m.gather(m.ctx, true); err != nil {
		return nil, err
	}
	y := m.module.Forward(x)
	if m.releases() && !tensor.GradEnabled() {
		m.release() // no backward follows
	}
	if m.cfg.strategy == ShardOptimizer || m.cfg.strategy == ShardGradOp {
		m.poolGradsOnBackward(y)
	}
	return y, nil
}

// poolGradsOnBackward has the backward pass through y, Forward's output,
// first give pooled gradient storage (pooledGrads) to the parameters of
// the units whose gradients no unit hook pools: with ShardOptimizer
// every unit's, with ShardGradOp the root units' (postForward pools each
// other unit's as its backward starts, so that only the units being
// reduced hold full gradients). launch gives the storage back, so that
// every step reuses one step's gradient memory, as DDP's buckets do,
// rather than leaving it to the collector.
func (m *Model) poolGradsOnBackward(y *tensor.Tensor) {
	if !backwardFollows(y) {
		return
	}
	y.AddBackwardPreHook(func(*tensor.Pass, *tensor.Tensor) {
		for ui, u := range m.units {
			if m.cfg.strategy == ShardOptimizer || u.root {
				m.pooledGrads(ui)
			}
		}
	})
}

// backwardFollows reports whether a backward pass may go through y.
func backwardFollows(y *tensor.Tensor) bool {
	return y != nil && y.RequiresGrad() && !y.IsLeaf() && tensor.GradEnabled()
}

// gathering is one unit's all-gather of its parameters in flight.
type gathering struct {
	work   *distributed.Work
	send   []float32 // from m.bufs, with recv; nil with bf16 parameters
	recv   []float32
	decode func() // with bf16 parameters: fills recv from what arrived
	bytes  int64  // the buffers it holds
}

// startGather starts the all-gather of unit ui's full parameters from the
// shards; forward says they are for a forward pass (or its backward),
// which takes them in the MixedPrecision's Param format.
func (m *Model) startGather(ctx context.Context, ui int, forward bool) {
	u := m.units[ui]
	bf16 := forward && m.cfg.mixed.Param == tensor.BF16
	if !bf16 && m.shardG.SharedMemory() {
		// On one host allreduce goes through shared memory and
		// all-gather through the sockets: summing blocks that are zero
		// but for each rank's own is the same gather (x + 0 is x
		// exactly), at a fraction of the copies. This rank's block is
		// its shards' chunks, written whole: only the others' need zeros.
		recv, _ := m.bufs.take(m.ns * u.block)
		clear(recv[:m.sr*u.block])
		clear(recv[(m.sr+1)*u.block:])
		own := recv[m.sr*u.block:]
		for _, i := range u.params {
			p := m.params[i]
			copy(own[p.off:], p.shard.Data())
		}
		u.gather = &gathering{work: m.shardG.AllReduceAsync(ctx, recv, distributed.Sum), recv: recv, bytes: 4 * int64(len(recv))}
		m.notePeak()
		return
	}
	// The shards fill send whole (a block is its parameters' chunks),
	// and the all-gather fills recv whole: neither needs zeroing.
	send, _ := m.bufs.take(u.block)
	for _, i := range u.params {
		p := m.params[i]
		copy(send[p.off:], p.shard.Data())
	}
	recv, _ := m.bufs.take(m.ns * u.block)
	if bf16 {
		wb := words(u.block)
		sw, rw := make([]int32, wb), make([]int32, m.ns*wb)
		encodeBF16(sw, send, 1)
		u.gather = &gathering{work: m.shardG.AllGatherAsync(ctx, rw, sw), recv: recv, bytes: 4 * int64(len(recv)+len(rw)), decode: func() {
			for r := 0; r < m.ns; r++ {
				decodeBF16(recv[r*u.block:(r+1)*u.block], rw[r*wb:(r+1)*wb])
			}
		}}
	} else {
		u.gather = &gathering{work: m.shardG.AllGatherAsync(ctx, recv, send), send: send, recv: recv, bytes: 4 * int64(len(recv))}
	}
	m.notePeak()
}

// finishGather waits for unit ui's all-gather, started if it is not in
// flight, and puts the full values into its parameters.
func (m *Model) finishGather(ctx context.Context, ui int, forward bool) error {
	u := m.units[ui]
	if u.gather == nil {
		m.startGather(ctx, ui, forward)
	}
	g := u.gather
	if err := g.work.Wait(ctx); err != nil {
		u.gather = nil
		return fmt.Errorf("fsdp: gathering the parameters of unit %s: %w", u.name, err)
	}
	if g.decode != nil {
		g.decode()
	}
	for _, i := range u.params {
		m.unpack(m.params[i], g.recv, u.block)
	}
	u.full = true
	m.notePeak() // the moment both the buffers and the full values are held
	u.gather = nil
	m.recycle(g)
	return nil
}

// dropGather waits for unit ui's all-gather in flight, if any, and
// discards what it brings: the pass that prefetched it did not run the
// unit.
func (m *Model) dropGather(ui int) {
	if g := m.units[ui].gather; g != nil {
		err := g.work.Wait(m.ctx) // the group's next collective reports a failure
		m.units[ui].gather = nil
		if err == nil {
			m.recycle(g)
		}
	}
}

// recycle gives a completed gather's buffers back for the next one.
func (m *Model) recycle(g *gathering) {
	m.bufs.put(g.send)
	m.bufs.put(g.recv)
}

// dropGathers is dropGather for every unit.
func (m *Model) dropGathers() {
	for ui := range m.units {
		m.dropGather(ui)
	}
}

// gather makes every module parameter hold the full values assembled from
// the shards, unit by unit (with Prefetch, all gathers in flight at once);
// forward says they are for a forward pass.
func (m *Model) gather(ctx context.Context, forward bool) error {
	if m.cfg.strategy == NoShard {
		return nil
	}
	if m.cfg.prefetch {
		for ui, u := range m.units {
			if len(u.params) > 0 && u.gather == nil {
				m.startGather(ctx, ui, forward)
			}
		}
	}
	var first error
	for ui, u := range m.units {
		if len(u.params) == 0 {
			continue
		}
		if first != nil {
			m.dropGather(ui)
			continue
		}
		first = m.finishGather(ctx, ui, forward)
	}
	return first
}

// unpack copies p's chunks out of a rank-major gathered block.
func (m *Model) unpack(p *param, recv []float32, block int) {
	full := p.t.Data()
	if len(full) != p.numel {
		full = make([]float32, p.numel)
		p.t.SetData(full)
	}
	for r := 0; r < m.ns; r++ {
		lo := r * p.chunk
		if lo >= p.numel {
			break
		}
		n := min(p.chunk, p.numel-lo)
		copy(full[lo:lo+n], recv[r*block+p.off:r*block+p.off+n])
	}
}

// release frees the full values of every parameter.
func (m *Model) release() {
	for ui := range m.units {
		m.releaseUnit(ui)
	}
}

// releaseUnit frees the full values of unit ui's parameters.
func (m *Model) releaseUnit(ui int) {
	u := m.units[ui]
	m.dropGather(ui)
	for _, i := range u.params {
		m.params[i].t.SetData(nil)
	}
	u.full = false
}

// NoSync runs f with gradient synchronisation off: backward passes inside f
// accumulate full local gradients in the module's parameters, and the
// first synchronised backward after it reduces the accumulated sum into
// the shards (gradient accumulation, like PyTorch's no_sync). Inside f the
// full gradients take a whole model's memory, as in PyTorch.
func (m *Model) NoSync(f func() error) error {
	prev := m.noSync
	m.noSync = true
	defer func() { m.noSync = prev }()
	return f()
}

// gradReady is the grad hook: parameter i's gradient is final in pass.
func (m *Model) gradReady(pass *tensor.Pass, i int) {
	if m.noSync {
		return
	}
	if pass != m.pass {
		m.beginPass(pass)
	}
	m.markReady(i)
	m.launchReady()
}

func (m *Model) beginPass(pass *tensor.Pass) {
	m.pass = pass
	m.next = 0
	m.inflight = m.inflight[:0]
	for _, u := range m.units {
		u.pending = len(u.params)
	}
	for _, p := range m.params {
		p.ready = false
	}
	pass.OnFinish(m.finishPass)
	// A parameter this pass does not reach contributes a zero gradient,
	// so every rank launches the same reductions.
	for i, p := range m.params {
		if !pass.Reaches(p.t) {
			m.markReady(i)
		}
	}
}

func (m *Model) markReady(i int) {
	p := m.params[i]
	if p.ready {
		if m.deferred == nil {
			m.deferred = fmt.Errorf("fsdp: parameter %s got its gradient twice in one backward pass", p.name)
		}
		return
	}
	p.ready = true
	m.units[p.unit].pending--
}

// launchReady starts the reductions of the units, in launch order, whose
// gradients are all final.
func (m *Model) launchReady() {
	for m.next < len(m.order) && m.units[m.order[m.next]].pending == 0 {
		m.launch(m.order[m.next])
		m.next++
	}
}

// launch starts unit ui's gradient reduction and frees what the strategy
// does not keep: the full gradients and, with parameter sharding, the
// full parameters, which backward has finished with.
func (m *Model) launch(ui int) {
	u := m.units[ui]
	// Rank-major: rank r's chunks of every parameter. The chunks tile
	// the buffer, each written whole (gradient, then zeros for padding or
	// a missing gradient), so it is taken without zeroing.
	send, _ := m.bufs.take(m.ns * u.block)
	for _, i := range u.params {
		p := m.params[i]
		var gd []float32
		if g := p.t.Grad(); g != nil && g.Len() == p.numel {
			gd = g.Data()
		}
		for r := 0; r < m.ns; r++ {
			dst := send[r*u.block+p.off : r*u.block+p.off+p.chunk]
			n := 0
			if lo := r * p.chunk; gd != nil && lo < p.numel {
				n = copy(dst, gd[lo:min(lo+p.chunk, p.numel)])
			}
			clear(dst[n:])
		}
	}
	red := reduction{unit: ui, send: send}
	switch {
	case m.world.Size() > 1 && m.cfg.mixed.Reduce == tensor.BF16:
		m.startBF16(&red, u)
	case m.world.Size() == 1:
		red.recv = send
	case m.cfg.strategy == NoShard:
		red.recv = send
		red.work = m.world.AllReduceAsync(m.ctx, send, distributed.Avg)
	case m.cfg.strategy == ShardOptimizer:
		red.recv = send[m.sr*u.block : (m.sr+1)*u.block]
		red.work = m.shardG.AllReduceAsync(m.ctx, send, distributed.Avg)
	case m.replG == nil && m.shardG.SharedMemory():
		// On one host allreduce goes through shared memory and
		// reduce-scatter through the sockets: this rank's block of the
		// allreduce is the reduce-scatter's result, at a fraction of
		// the copies, summed as DDP's allreduce sums.
		red.recv = send[m.sr*u.block : (m.sr+1)*u.block]
		red.pooled, red.recvInSend = true, true
		red.work = m.shardG.AllReduceAsync(m.ctx, send, distributed.Avg)
	default:
		red.recv, _ = m.bufs.take(u.block) // the reduce-scatter writes it whole
		red.pooled = true
		red.work = m.shardG.ReduceScatterAsync(m.ctx, red.recv, send, distributed.Avg)
	}
	red.bytes = 4 * len(send)
	m.inflight = append(m.inflight, red)
	m.reclaimSends()
	if m.cfg.strategy == NoShard {
		return
	}
	for _, i := range u.params {
		p := m.params[i]
		if g := p.t.Grad(); p.pooledGrad && g != nil && g.Len() == p.numel {
			m.bufs.put(g.Data()) // copied into send above
		}
		p.pooledGrad = false
		p.t.SetGrad(nil)
	}
	if m.releases() {
		m.releaseUnit(ui)
	}
}

// reclaimSends gives back the send buffers of the reduce-scatters that
// have finished, waiting for the oldest while more than maxReducing hold
// one, and adds what they brought into the shards at once where nothing
// else is to be done with it (no bf16 decoding, no averaging across
// nodes), so that neither buffer waits for the end of backward. A failed
// reduction keeps its buffers; finishPass reports it.
func (m *Model) reclaimSends() {
	held := 0
	for _, red := range m.inflight {
		if red.pooled && red.send != nil {
			held++
		}
	}
	for i := range m.inflight {
		red := &m.inflight[i]
		if !red.pooled || red.send == nil {
			continue
		}
		select {
		case <-red.work.Done():
		default:
			if held <= maxReducing {
				continue
			}
		}
		if err := red.work.Wait(m.ctx); err != nil {
			return
		}
		held--
		if red.decode == nil && m.replG == nil {
			m.apply(red)
			continue
		}
		m.bufs.put(red.send)
		red.send = nil
	}
}

// finishPass runs at the end of Backward: it waits for the reductions and
// adds each unit's averaged gradient slice into its shards' Grad.
func (m *Model) finishPass() error {
	m.pass = nil
	m.dropGathers() // prefetched for a unit backward did not reach
	var errs []error
	if m.deferred != nil {
		errs = append(errs, m.deferred)
		m.deferred = nil
	}
	if m.next < len(m.order) {
		var names []string
		for _, p := range m.params {
			if !p.ready {
				names = append(names, p.name)
			}
		}
		errs = append(errs, fmt.Errorf("fsdp: parameters %v received no gradient in this backward pass", names))
	}
	failed := false
	for i := range m.inflight {
		red := &m.inflight[i]
		u := m.units[red.unit]
		if red.applied {
			continue
		}
		if red.work != nil {
			if err := red.work.Wait(m.ctx); err != nil {
				errs = append(errs, fmt.Errorf("fsdp: reducing the gradients of unit %s (%d parameters, %d bytes): %w",
					u.name, len(u.params), red.bytes, err))
				failed = true
				continue
			}
		}
		if failed {
			continue
		}
		if red.decode != nil {
			red.decode()
		}
		if m.replG != nil {
			if err := m.replG.AllReduce(m.ctx, red.recv, distributed.Avg); err != nil {
				errs = append(errs, fmt.Errorf("fsdp: averaging the gradients of unit %s across nodes: %w", u.name, err))
				failed = true
				continue
			}
		}
		m.apply(red)
	}
	m.inflight = m.inflight[:0]
	return errors.Join(errs...)
}

// apply adds a finished reduction's averaged gradients into its unit's
// shards and gives its buffers back.
func (m *Model) apply(red *reduction) {
	if m.joinScale != 0 && m.joinScale != 1 {
		for k := range red.recv {
			red.recv[k] *= m.joinScale
		}
	}
	for _, i := range m.units[red.unit].params {
		m.accumulate(m.params[i], red.recv[m.params[i].off:])
	}
	// send, from m.bufs, is free now, for the next step's gathers and
	// reductions of its size; recv is a part of it, a pooled buffer of
	// its own, or (bf16 reduce-scatter) one the collector takes.
	m.bufs.put(red.send)
	if red.pooled && !red.recvInSend {
		m.bufs.put(red.recv)
	}
	red.send, red.recv = nil, nil
	red.applied = true
}

// accumulate stores p's reduced gradient: with NoShard it replaces the
// full gradient (as DDP's), otherwise it is added to the shard's Grad, so
// that synchronised passes without ZeroGrad between them accumulate.
func (m *Model) accumulate(p *param, src []float32) {
	if m.cfg.strategy == NoShard {
		src = src[:p.numel]
		if g := p.t.Grad(); g != nil && g.Len() == p.numel {
			copy(g.Data(), src)
		} else {
			p.t.SetGrad(tensor.New(append([]float32(nil), src...), p.shape...))
		}
		return
	}
	src = src[:p.chunk]
	g := p.shard.Grad()
	if g == nil {
		p.shard.SetGrad(tensor.New(append([]float32(nil), src...), p.chunk))
		return
	}
	kernels.Add(g.Data(), src)
}

// Close removes the model's hooks and ends its collectives. The groups
// HybridShard made are destroyed with g, not here: a peer may still be
// finishing its part of the last collective on them.
func (m *Model) Close() error {
	for _, r := range m.removers {
		r()
	}
	m.removers = nil
	if m.cancel != nil {
		m.cancel()
	}
	return nil
}

// broadcastBatch is the most float32 values broadcastTensors copies into
// one message: small tensors go together, so that buffers and biases cost
// few collectives, and a large tensor goes on its own storage, so that
// copying a whole model at setup needs no second model's memory.
const broadcastBatch = 1 << 20

// broadcastTensors copies rank root's values of ts to every rank.
func broadcastTensors(ctx context.Context, g *distributed.Group, ts []*tensor.Tensor, root int) error {
	var batch []*tensor.Tensor
	var flat []float32
	flush := func() error {
		if len(flat) == 0 {
			return nil
		}
		if err := g.Broadcast(ctx, flat, root); err != nil {
			return err
		}
		off := 0
		for _, t := range batch {
			off += copy(t.Data(), flat[off:off+t.Len()])
		}
		batch, flat = batch[:0], flat[:0]
		return nil
	}
	for _, t := range ts {
		n := t.Len()
		switch {
		case n == 0:
		case n >= broadcastBatch:
			if err := g.Broadcast(ctx, t.Data(), root); err != nil {
				return err
			}
		default:
			if len(flat)+n > broadcastBatch {
				if err := flush(); err != nil {
					return err
				}
			}
			batch = append(batch, t)
			flat = append(flat, t.Data()...)
		}
	}
	return flush()
}

// Footprint is what this rank holds of the model, in bytes: the float32
// values of the parameters (shards and any full values the module holds)
// and of their gradients.
type Footprint struct {
	Params, Grads int64
	// Gathered is the full parameter values the module's parameters hold
	// plus the receive buffers of all-gathers in flight; PeakGathered is
	// the most Gathered has been since New or ResetPeak, sampled whenever
	// it grows. With FullShard and HybridShard, PeakGathered is what a
	// training step gathers at once (the rest of Params is the shards).
	Gathered, PeakGathered int64
}

// Footprint returns what this rank holds now: between steps, with
// FullShard, only the shards and their gradients.
func (m *Model) Footprint() Footprint {
	f := Footprint{Gathered: m.gatheredBytes(), PeakGathered: m.peak}
	for _, p := range m.params {
		f.Params += 4 * int64(p.t.Len())
		if g := p.t.Grad(); g != nil {
			f.Grads += 4 * int64(g.Len())
		}
		if p.shard != p.t {
			f.Params += 4 * int64(p.shard.Len())
			if g := p.shard.Grad(); g != nil {
				f.Grads += 4 * int64(g.Len())
			}
		}
	}
	return f
}
