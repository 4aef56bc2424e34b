package localsgd

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// Group is what the package needs of a process group; *distributed.Group
// implements it. If the group also has AllReduceAsync and AllGatherAsync
// (as *distributed.Group does), a delayed sync is issued on the group's
// queue at once, in step order with the training loop's other
// collectives; otherwise it runs on a goroutine of its own.
type Group = ddp.Group

// Defaults of the DiLoCo paper (Douillard et al., 2023) for the outer
// optimizer.
const (
	DefaultOuterLR       = 0.7
	DefaultOuterMomentum = 0.9
)

// ErrConfig is wrapped by the errors of New for options that do not fit
// together.
var ErrConfig = errors.New("localsgd: invalid configuration")

// Option configures NewLocalSGD or NewDiLoCo.
type Option func(*config)

type config struct {
	fragments int
	bf16      bool
	delay     int
	alpha     float64
	outer     func(params []*tensor.Tensor) optim.Optimizer
	inner     optim.Optimizer
}

// Fragments splits the parameters into f contiguous fragments of about
// equal size that sync at staggered steps (streaming DiLoCo); 1, the
// default, syncs the whole model at once. f may not exceed h or
// the number of parameters.
func Fragments(f int) Option { return func(c *config) { c.fragments = f } }

// BF16 sends DiLoCo's outer gradient as bfloat16 (half the bytes of
// float32), rounded to nearest even; θ_global and the sum stay float32.
func BF16(on bool) Option { return func(c *config) { c.bf16 = on } }

// Delay lets a DiLoCo fragment's reduction overlap the next tau inner
// steps: it starts at the fragment's sync step and its result is applied
// tau steps later (0, the default, applies it at once). tau may not
// exceed the spacing of the fragments, h/f, so that one
// fragment at a time is in flight.
func Delay(tau int) Option { return func(c *config) { c.delay = tau } }

// Alpha is the share of the replica's own parameters kept when a synced
// fragment is applied: θ = α·θ_local + (1−α)·θ_global. 0, the default,
// replaces the replica's parameters with θ_global; α in [0, 1).
func Alpha(a float64) Option { return func(c *config) { c.alpha = a } }

// OuterOptimizer makes DiLoCo's outer optimizer over the θ_global
// tensors it is given (one per parameter, in the model's order), whose
// gradients are the averaged outer gradients. The default is
// optim.NewSGD(params, 0.7, Momentum(0.9), Nesterov(true)).
func OuterOptimizer(f func(params []*tensor.Tensor) optim.Optimizer) Option {
	return func(c *config) { c.outer = f }
}

// InnerOptimizer names the optimizer that steps the replica, so that
// GatherState and StateDict carry every rank's own state of it (each
// rank's moments differ between syncs) and a resumed run continues bit
// for bit. Without it a checkpoint resumes every rank with the
// optimizer state the checkpoint's own Optimizer holds (rank 0's).
func InnerOptimizer(opt optim.Optimizer) Option { return func(c *config) { c.inner = opt } }

// Stats are a Model's sync counts and the bytes they sent.
type Stats struct {
	// Syncs counts fragment syncs (a whole-model sync of F fragments
	// counts F).
	Syncs int64
	// SentBytes is the payload this rank handed to the collectives of
	// its syncs: 4 bytes per float32 element (parameters or outer
	// gradients, and buffers), 2 per bfloat16 one. A ring allreduce puts
	// about 2(n−1)/n of its payload on this rank's link; the bfloat16
	// gather (n−1) times it.
	SentBytes int64
}

// Model is a replica trained with LocalSGD or DiLoCo. It implements the
// training step's view of a model (Forward, Parameters) and
// checkpoint.Stateful. Its methods are for the training goroutine.
type Model struct {
	module  nn.Module
	g       Group
	cfg     config
	h       int
	diloco  bool
	params  []*tensor.Tensor
	names   []string
	buffers []*tensor.Tensor
	// globals[i] is parameter i's θ_global, a view of its fragment's
	// global buffer (DiLoCo only); outer steps them.
	globals []*tensor.Tensor
	outer   optim.Optimizer
	frags   []*fragment
	// step counts the inner steps taken, including those before a resume.
	step         int64
	contributors int
	stats        Stats
	// gathered[r] is rank r's flat parameters and inner optimizer state,
	// from GatherState, for StateDict; nil otherwise.
	gathered   [][]float32
	gatheredAt int64    // the step GatherState ran at
	innerKeys  []string // the inner state's tensor names in gathered, sorted
	// trace, if set, sees every sync start ("start") and apply ("apply").
	trace func(step int64, frag int, event string)
	// silent makes a reduction send zeros for this replica (Reduce's
	// contribute false); reduced and bufAvg are what Reduce finished for
	// Apply: the fragments and the averaged buffers.
	silent  bool
	reduced []*fragment
	bufAvg  []float32
}

// NewLocalSGD wraps module for LocalSGD over g: each rank steps its own
// optimizer and every h steps the parameters are averaged over the
// ranks (buffers, such as BatchNorm's running statistics, too). Like
// ddp.New it checks that every rank has the same parameters and copies
// rank 0's parameters and buffers to all. Fragments is allowed (each
// fragment is averaged every h steps, staggered); BF16, Delay, Alpha and
// OuterOptimizer are DiLoCo's and are an error here.
func NewLocalSGD(ctx context.Context, module nn.Module, g Group, h int, opts ...Option) (*Model, error) {
	return newModel(ctx, module, g, h, false, opts)
}

// NewDiLoCo wraps module for DiLoCo over g with h inner steps between
// syncs (see the package documentation), checking and copying the
// parameters as NewLocalSGD does.
func NewDiLoCo(ctx context.Context, module nn.Module, g Group, h int, opts ...Option) (*Model, error) {
	return newModel(ctx, module, g, h, true, opts)
}

func newModel(ctx context.Context, module nn.Module, g Group, h int, diloco bool, opts []Option) (*Model, error) {
	cfg := config{fragments: 1}
	for _, o := range opts {
		o(&cfg)
	}
	m := &Model{module: module, g: g, cfg: cfg, h: h, diloco: diloco, contributors: g.Size()}
	for _, np := range nn.NamedParameters(module) {
		if np.Tensor.RequiresGrad() {
			m.params = append(m.params, np.Tensor)
			m.names = append(m.names, np.Name)
		}
	}
	for _, nb := range nn.NamedBuffers(module) {
		m.buffers = append(m.buffers, nb.Tensor)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	if g.Size() > 1 {
		if err := m.verify(ctx); err != nil {
			return nil, err
		}
		for _, t := range append(append([]*tensor.Tensor(nil), m.params...), m.buffers...) {
			if err := g.Broadcast(ctx, t.Data(), 0); err != nil {
				return nil, fmt.Errorf("localsgd: broadcasting rank 0's parameters: %w", err)
			}
		}
	}
	m.frags = split(m.params, cfg.fragments, h)
	if diloco {
		m.globals = make([]*tensor.Tensor, len(m.params))
		for _, f := range m.frags {
			f.global = make([]float32, f.numel)
			off := 0
			for i := f.lo; i < f.hi; i++ {
				p := m.params[i]
				copy(f.global[off:], p.Data())
				m.globals[i] = tensor.New(f.global[off:off+p.Len()], p.Shape()...)
				off += p.Len()
			}
		}
		if cfg.outer != nil {
			m.outer = cfg.outer(m.globals)
		} else {
			m.outer = optim.NewSGD(m.globals, DefaultOuterLR, optim.Momentum(DefaultOuterMomentum), optim.Nesterov(true))
		}
	}
	return m, nil
}

// validate checks the configuration, naming what does not fit.
func (m *Model) validate() error {
	c := m.cfg
	switch {
	case m.h < 1:
		return fmt.Errorf("%w: sync every %d steps: want at least 1", ErrConfig, m.h)
	case len(m.params) == 0:
		return fmt.Errorf("%w: the model has no parameter that requires a gradient", ErrConfig)
	case c.fragments < 1:
		return fmt.Errorf("%w: %d fragments: want at least 1", ErrConfig, c.fragments)
	case c.fragments > m.h:
		return fmt.Errorf("%w: %d fragments syncing every %d steps: want at most one fragment per step (fragments ≤ %d)", ErrConfig, c.fragments, m.h, m.h)
	case c.fragments > len(m.params):
		return fmt.Errorf("%w: %d fragments of a model with %d parameters: want at most one fragment per parameter", ErrConfig, c.fragments, len(m.params))
	case c.delay < 0:
		return fmt.Errorf("%w: delay %d steps: want 0 or more", ErrConfig, c.delay)
	case c.delay > m.h/c.fragments:
		return fmt.Errorf("%w: delay %d steps with fragments %d steps apart (sync every %d / %d fragments): a delay of at most %d keeps one fragment in flight", ErrConfig, c.delay, m.h/c.fragments, m.h, c.fragments, m.h/c.fragments)
	case math.IsNaN(c.alpha) || c.alpha < 0 || c.alpha >= 1:
		return fmt.Errorf("%w: alpha %v: want 0 ≤ alpha < 1", ErrConfig, c.alpha)
	}
	if !m.diloco {
		switch {
		case c.bf16:
			return fmt.Errorf("%w: bf16 is DiLoCo's outer gradient; LocalSGD averages the parameters in float32", ErrConfig)
		case c.delay != 0:
			return fmt.Errorf("%w: delay is DiLoCo's; LocalSGD averages the parameters at the sync step", ErrConfig)
		case c.alpha != 0:
			return fmt.Errorf("%w: alpha is DiLoCo's; LocalSGD replaces the parameters with their average", ErrConfig)
		case c.outer != nil:
			return fmt.Errorf("%w: an outer optimizer is DiLoCo's; LocalSGD has none", ErrConfig)
		}
	}
	return nil
}

// verify checks that every rank has the same parameter names and shapes,
// comparing a hash of them over the group.
func (m *Model) verify(ctx context.Context) error {
	h := fnv.New64a()
	for i, p := range m.params {
		fmt.Fprintf(h, "%s%v;", m.names[i], p.Shape())
	}
	fmt.Fprintf(h, "buffers%d;", len(m.buffers))
	for _, b := range m.buffers {
		fmt.Fprintf(h, "%v;", b.Shape())
	}
	fmt.Fprintf(h, "%v %d %d %v %d %v", m.diloco, m.h, m.cfg.fragments, m.cfg.bf16, m.cfg.delay, m.cfg.alpha)
	all := make([]int64, m.g.Size())
	if err := m.g.AllGather(ctx, all, []int64{int64(h.Sum64())}); err != nil {
		return fmt.Errorf("localsgd: comparing the ranks' models: %w", err)
	}
	for r, v := range all {
		if v != all[0] {
			return fmt.Errorf("localsgd: rank %d's model or configuration differs from rank 0's (parameter names, shapes, buffers, sync every, fragments, bf16, delay or alpha)", r)
		}
	}
	return nil
}

// Forward runs the wrapped module: no collective, the sync is AfterStep's.
func (m *Model) Forward(x *tensor.Tensor) *tensor.Tensor { return m.module.Forward(x) }

// Parameters returns the parameters the inner optimizer steps, in the
// module's order.
func (m *Model) Parameters() []*tensor.Tensor { return m.params }

// Module returns the wrapped module.
func (m *Model) Module() nn.Module { return m.module }

// Outer returns DiLoCo's outer optimizer, nil for LocalSGD.
func (m *Model) Outer() optim.Optimizer { return m.outer }

// Step returns the number of inner steps taken, counting those before a
// resume.
func (m *Model) Step() int64 { return m.step }

// Fragments returns each fragment's parameter index range [lo, hi), in
// order.
func (m *Model) Fragments() [][2]int {
	out := make([][2]int, len(m.frags))
	for i, f := range m.frags {
		out[i] = [2]int{f.lo, f.hi}
	}
	return out
}

// Stats returns the sync counts and bytes so far (of this Model, not
// restored by a resume).
func (m *Model) Stats() Stats { return m.stats }

// Contributors returns the count the average divides the ranks' sum by:
// the group's size unless SetContributors changed it.
func (m *Model) Contributors() int { return m.contributors }

// SetContributors sets the count the next syncs divide the ranks' sum
// by, for a membership layer whose absent replicas contribute zeros
// (DiLoCo's outer gradient, or LocalSGD's parameters) so that the
// average is over the n replicas that completed. n must be at least 1.
func (m *Model) SetContributors(n int) error {
	if n < 1 {
		return fmt.Errorf("localsgd: %d contributors: want at least 1", n)
	}
	m.contributors = n
	return nil
}

// Close waits for a reduction still in flight, whose error it returns;
// the parameters stay as they are.
func (m *Model) Close() error {
	var errs []error
	for _, f := range m.frags {
		if f.pending != nil {
			errs = append(errs, f.pending.wait(context.Background()))
			f.pending = nil
		}
	}
	return errors.Join(errs...)
}
