package ddp

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// ErrNoBatchNorm is returned by ConvertSyncBatchNorm for a module without
// a BatchNorm layer.
var ErrNoBatchNorm = errors.New("ddp: the model has no BatchNorm layer to synchronise")

// SyncBatchNorm makes BatchNorm layers normalise over the global batch of
// a group, PyTorch's nn.SyncBatchNorm: it is the nn.StatsReducer of the
// layers it synchronises (their Sync field). In training, each layer's
// forward pass runs one allreduce of its per-channel sums, sums of squares
// and count, and its backward pass one of the per-channel Σdy and Σdy·x̂,
// so that outputs, input gradients and running statistics are those of
// BatchNorm over the batches of all ranks concatenated, whatever each
// rank's batch size (zero included: such a rank still joins the
// allreduces). The gradients of weight and bias stay local, for DDP to
// average. In eval mode the layers use their running statistics and
// communicate nothing; in a world of one nothing is sent.
//
// Both reductions are needed at once (the normalisation waits for the
// statistics, the input gradient for the sums), so they run on the
// goroutine running forward and backward. Collectives issued from two
// goroutines of one group may be ordered differently on different ranks:
// when the model is wrapped in DDP whose reductions overlap backward (see
// OverlapComm), give SyncBatchNorm a group of its own
// (distributed.Group.NewGroup with every rank); New refuses DDP's own
// (ErrSyncBatchNormGroup).
//
// The layers keep their type, parameters, buffers and state-dict names,
// so checkpoints load into either form. A failed reduction (a dead peer,
// ctx cancelled) is kept: later reductions fail at once without
// communicating, the layers go on with local statistics so the step
// completes, and the next Backward through a synchronised layer whose
// weight requires grad returns the error; Err reports it too.
//
// A SyncBatchNorm is used by the goroutine running forward and backward.
type SyncBatchNorm struct {
	ctx      context.Context
	g        Group
	layers   []nn.NamedModule
	err      error        // the first failed reduction
	pass     *tensor.Pass // the last Backward err was queued in
	removers []func()
}

// NewSyncBatchNorm synchronises the given BatchNorm layers over g (every
// rank passes its copies of the same layers, in the same order); ctx
// bounds every reduction for the SyncBatchNorm's lifetime, as New's does
// for DDP. It panics on a nil group or layer, or a layer synchronised
// already: a mistake in the program.
func NewSyncBatchNorm(ctx context.Context, g Group, layers ...*nn.BatchNormLayer) *SyncBatchNorm {
	named := make([]nn.NamedModule, len(layers))
	for i, l := range layers {
		named[i] = nn.NamedModule{Name: fmt.Sprintf("layer %d", i), Module: l}
	}
	s, err := newSyncBatchNorm(ctx, g, named)
	if err != nil {
		panic(err.Error())
	}
	return s
}

// ConvertSyncBatchNorm synchronises every BatchNorm layer of module over g,
// like PyTorch's nn.SyncBatchNorm.convert_sync_batchnorm: the layers stay
// in place with their weights, running statistics and state-dict names,
// and only their statistics become global. Call it on every rank before
// wrapping the module in DDP. It returns ErrNoBatchNorm for a module
// without BatchNorm, and an error naming the layer for one synchronised
// already.
func ConvertSyncBatchNorm(ctx context.Context, module nn.Module, g Group) (*SyncBatchNorm, error) {
	var layers []nn.NamedModule
	for _, nm := range nn.NamedModules(module) {
		if _, ok := nm.Module.(*nn.BatchNormLayer); ok {
			layers = append(layers, nm)
		}
	}
	if len(layers) == 0 {
		return nil, ErrNoBatchNorm
	}
	return newSyncBatchNorm(ctx, g, layers)
}

func newSyncBatchNorm(ctx context.Context, g Group, layers []nn.NamedModule) (*SyncBatchNorm, error) {
	if g == nil {
		return nil, errors.New("ddp: SyncBatchNorm: nil group")
	}
	for _, nm := range layers {
		l, _ := nm.Module.(*nn.BatchNormLayer)
		if l == nil {
			return nil, fmt.Errorf("ddp: SyncBatchNorm: %s is nil", nm.Name)
		}
		if l.Sync != nil {
			return nil, fmt.Errorf("ddp: SyncBatchNorm: %s (%v) is synchronised already", displayName(nm.Name), l)
		}
	}
	s := &SyncBatchNorm{ctx: ctx, g: g, layers: layers}
	for _, nm := range layers {
		l := nm.Module.(*nn.BatchNormLayer)
		l.Sync = s
		if l.Weight.RequiresGrad() {
			s.removers = append(s.removers, l.Weight.AddGradHook(s.gradReady))
		}
	}
	return s, nil
}

// displayName is a layer's dotted name, or "the root module" for "".
func displayName(name string) string {
	if name == "" {
		return "the root module"
	}
	return name
}

// Layers returns the names of the synchronised layers: their dotted paths
// for ConvertSyncBatchNorm ("1", "features.bn1"), "layer i" for
// NewSyncBatchNorm.
func (s *SyncBatchNorm) Layers() []string {
	out := make([]string, len(s.layers))
	for i, nm := range s.layers {
		out[i] = displayName(nm.Name)
	}
	return out
}

// ReduceStats sums buf over the group (nn.StatsReducer). After a failure
// it returns that error without communicating.
func (s *SyncBatchNorm) ReduceStats(buf []float64) error {
	if s.err != nil {
		return s.err
	}
	if s.g.Size() == 1 {
		return nil
	}
	if err := s.g.AllReduce(s.ctx, buf, distributed.Sum); err != nil {
		s.err = fmt.Errorf("ddp: SyncBatchNorm: reducing batch statistics: %w", err)
		return s.err
	}
	return nil
}

// gradReady queues the kept error, once per Backward, to be returned by
// it: the layers cannot return one from their forward or backward.
func (s *SyncBatchNorm) gradReady(pass *tensor.Pass, _ *tensor.Tensor) {
	if pass == s.pass {
		return
	}
	s.pass = pass
	pass.OnFinish(s.Err)
}

// Err returns the first failed reduction, nil if none.
func (s *SyncBatchNorm) Err() error { return s.err }

// Close turns the layers back into plain BatchNorm over the local batch.
func (s *SyncBatchNorm) Close() error {
	for _, r := range s.removers {
		r()
	}
	s.removers = nil
	for _, nm := range s.layers {
		if l := nm.Module.(*nn.BatchNormLayer); l.Sync == s {
			l.Sync = nil
		}
	}
	return nil
}

// ErrSyncBatchNormGroup is returned by New for a module whose SyncBatchNorm
// layers reduce over DDP's own group while DDP's reductions run beside
// backward (see OverlapComm): the two goroutines' collectives could be
// ordered differently on different ranks.
var ErrSyncBatchNormGroup = errors.New("ddp: SyncBatchNorm reduces over DDP's group, whose reductions overlap backward; give it a group of its own (distributed.Group.NewGroup with every rank) or OverlapComm(false)")

// checkSyncBatchNormGroup refuses SyncBatchNorm layers of module that
// share DDP's group g when DDP's reductions do not run inline.
func checkSyncBatchNormGroup(module nn.Module, g Group, inline bool) error {
	if inline {
		return nil
	}
	for _, nm := range nn.NamedModules(module) {
		l, ok := nm.Module.(*nn.BatchNormLayer)
		if !ok {
			continue
		}
		if s, ok := l.Sync.(*SyncBatchNorm); ok && sameGroup(s.g, g) {
			return fmt.Errorf("%w (layer %s)", ErrSyncBatchNormGroup, displayName(nm.Name))
		}
	}
	return nil
}

// sameGroup reports whether a and b are the same group value; values of a
// type that cannot be compared are taken to differ.
func sameGroup(a, b Group) bool {
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	return a == b
}
