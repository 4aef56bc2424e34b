// Package optim provides PyTorch's optimizers and learning-rate schedulers
// for gotrain parameters.
//
// Every optimizer is one shared core (parameters, learning rate,
// per-parameter state, state dicts) with a small update rule:
// NewSGD, NewAdam, NewAdamW and NewAdadelta follow torch.optim's algorithms
// step for step, so a training run here tracks the same run in PyTorch.
// Parameters whose gradient is nil are skipped by Step, as in PyTorch.
//
// The constructor's parameters are the first parameter group;
// AddParamGroup adds more, each with its own learning rate and weight
// decay (no decay on biases and LayerNorm weights is the usual use).
// ClipGradNorm is torch.nn.utils.clip_grad_norm_. The schedulers (StepLR,
// CosineAnnealingLR, LambdaLR, LinearLR, SequentialLR, OneCycleLR) set
// every group's rate from its own base rate and may be stepped per epoch
// or per batch.
//
// Optimizer and scheduler state round-trips through State, which the
// checkpoint package writes next to the model so that training resumes on
// exactly the trajectory it left.
//
// An optimizer and its scheduler belong to the training loop's goroutine.
// Step runs on that goroutine alone: its loops are vectorised and bound by
// memory bandwidth, so a second goroutine measured slower, not faster.
//
// Invalid hyper-parameters panic and state that does not fit returns an
// error, following the module's conventions (package
// github.com/gotrain/gotrain).
package optim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/internal/option"
	"github.com/gotrain/gotrain/tensor"
)

// ErrStateDict is wrapped by errors from LoadStateDict when the state does
// not fit the optimizer or scheduler it is loaded into.
var ErrStateDict = errors.New("optim: state dict does not match")

// Optimizer updates parameters from their gradients.
type Optimizer interface {
	// Step applies one update to every parameter that has a gradient.
	Step()
	// ZeroGrad sets every gradient to zero in place, keeping its storage
	// (DDP's gradients are views into its communication buckets).
	ZeroGrad()
	// LR returns the current learning rate (of the first group).
	LR() float64
	// SetLR sets the learning rate of every parameter group.
	SetLR(lr float64)
	// AddParamGroup adds parameters as a new group with its own options
	// (LR, WeightDecay), as torch.optim's add_param_group.
	AddParamGroup(params []*tensor.Tensor, opts ...Option)
	// NumGroups returns the number of parameter groups (at least 1: the
	// constructor's parameters).
	NumGroups() int
	// GroupLR returns group g's learning rate.
	GroupLR(g int) float64
	// SetGroupLR sets group g's learning rate.
	SetGroupLR(g int, lr float64)
	// StateDict returns a copy of the optimizer's state and hyper-parameters.
	StateDict() State
	// LoadStateDict replaces the state and hyper-parameters with st, which
	// must come from the same kind of optimizer over parameters of the same
	// shapes. On error the optimizer is unchanged.
	LoadStateDict(st State) error
}

// State is a serialisable snapshot of an optimizer or scheduler.
//
// Tensors holds per-parameter buffers named like PyTorch's state dict,
// "state.<i>.<buffer>" with i the parameter's index (for example
// "state.0.momentum_buffer", "state.3.exp_avg_sq"). Meta holds
// hyper-parameters and counters as strings ("lr", "betas",
// "state.0.step", ...) with floats formatted to round-trip exactly.
type State struct {
	Tensors map[string]*tensor.Tensor
	Meta    map[string]string
}

// hyper is one named hyper-parameter, stored in Meta.
type hyper struct {
	name string
	f    *float64 // exactly one of f, b is set
	b    *bool
}

// updateFunc applies one step to parameter p with gradient g. slots holds
// the parameter's state buffers (zeroed on its first step) in the order of
// core.slots; scratch is a temporary buffer of len(p); step is the
// parameter's step count including this one; grp is the parameter's
// group, whose learning rate and weight decay the step uses.
type updateFunc func(p, g, scratch []float32, slots [][]float32, step int64, grp *group)

// core is the machinery every optimizer shares.
type core struct {
	kind   string // "SGD", "Adam", ...: checked by LoadStateDict
	params []*tensor.Tensor
	// groups are the parameter groups, in order: groups[0] holds the
	// constructor's parameters; groupOf[i] is parameter i's group.
	groups  []group
	groupOf []int
	// defaultWD is the constructor's weight decay, which an added group
	// takes unless given its own.
	defaultWD float64
	hypers    []hyper
	slots     []string // state buffer names, e.g. "exp_avg"
	// structural names the float hyper-parameter whose being zero decides
	// which slots exist (SGD's momentum): a state must agree on it.
	structural string
	// state[i] holds parameter i's buffers; nil until its first step.
	state [][][]float32
	steps []int64
	// scratch is handed to update rules that need a temporary gradient.
	scratch []float32
	update  updateFunc
}

func newCore(kind string, params []*tensor.Tensor, lr, weightDecay float64, slots []string) core {
	if !validLR(lr) {
		panic(fmt.Sprintf("optim: %s: invalid learning rate %v", kind, lr))
	}
	c := core{kind: kind, slots: slots, defaultWD: weightDecay}
	c.addGroup(params, group{lr: lr, weightDecay: weightDecay})
	return c
}

// addGroup appends params as a new group with g's hyper-parameters,
// panicking on a nil parameter or one already in the optimizer.
func (c *core) addGroup(params []*tensor.Tensor, g group) {
	seen := make(map[*tensor.Tensor]int, len(c.params)+len(params))
	for i, p := range c.params {
		seen[p] = i
	}
	for k, p := range params {
		i := len(c.params) + k
		if p == nil {
			panic(fmt.Sprintf("optim: %s: parameter %d is nil", c.kind, i))
		}
		// A repeated parameter would be updated twice per step.
		if j, ok := seen[p]; ok {
			panic(fmt.Sprintf("optim: %s: parameter %d is also parameter %d", c.kind, i, j))
		}
		seen[p] = i
	}
	g.n = len(params)
	c.groups = append(c.groups, g)
	for range params {
		c.groupOf = append(c.groupOf, len(c.groups)-1)
	}
	c.params = append(c.params, params...)
	c.state = append(c.state, make([][][]float32, len(params))...)
	c.steps = append(c.steps, make([]int64, len(params))...)
}

// Step applies one update to every parameter that has a gradient.
func (c *core) Step() {
	for i, p := range c.params {
		g := p.Grad()
		if g == nil {
			continue
		}
		if c.state[i] == nil {
			c.state[i] = make([][]float32, len(c.slots))
			for k := range c.slots {
				c.state[i][k] = make([]float32, p.Len())
			}
		}
		c.steps[i]++
		c.apply(p.Data(), g.Data(), c.state[i], c.steps[i], &c.groups[c.groupOf[i]])
	}
}

// updateSplitMin is the fewest elements per goroutine worth spreading an
// update over threads: below it the wake-up costs more than the pass, and
// updateSplitAlign keeps every chunk but the last a whole number of any
// kernel's vectors, so each element is computed by the same code path as
// in one pass and the result is the same bits.
const (
	updateSplitMin   = 1 << 15
	updateSplitAlign = 64
)

// apply runs the update rule on one parameter. Every rule is element by
// element, so a large parameter is split into disjoint chunks updated on
// up to kernels.NumThreads goroutines.
func (c *core) apply(p, g []float32, slots [][]float32, step int64, grp *group) {
	if cap(c.scratch) < len(p) {
		c.scratch = make([]float32, len(p))
	}
	scratch := c.scratch[:len(p)]
	workers := min(kernels.NumThreads(), len(p)/updateSplitMin)
	if workers <= 1 {
		c.update(p, g, scratch, slots, step, grp)
		return
	}
	chunk := func(w int) {
		lo := w * len(p) / workers / updateSplitAlign * updateSplitAlign
		hi := len(p)
		if w+1 < workers {
			hi = (w + 1) * len(p) / workers / updateSplitAlign * updateSplitAlign
		}
		sub := make([][]float32, len(slots))
		for k, s := range slots {
			sub[k] = s[lo:hi]
		}
		c.update(p[lo:hi], g[lo:hi], scratch[lo:hi], sub, step, grp)
	}
	kernels.Parallel(workers, chunk)
}

// ZeroGrad sets every gradient to zero in place.
func (c *core) ZeroGrad() {
	for _, p := range c.params {
		p.ZeroGrad()
	}
}

// LR returns the current learning rate of the first parameter group.
func (c *core) LR() float64 { return c.groups[0].lr }

// SetLR sets the learning rate of every parameter group to lr.
func (c *core) SetLR(lr float64) {
	for g := range c.groups {
		c.SetGroupLR(g, lr)
	}
}

// validLR reports whether lr is a learning rate: finite and not negative
// (NaN fails every comparison, so lr < 0 alone lets it through).
func validLR(lr float64) bool { return lr >= 0 && !math.IsInf(lr, 0) }

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// StateDict returns a copy of the optimizer's state and hyper-parameters.
func (c *core) StateDict() State {
	st := State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{
		"optimizer": c.kind,
		"params":    strconv.Itoa(len(c.params)),
	}}
	c.groupsMeta(st.Meta)
	for _, h := range c.hypers {
		if h.f != nil {
			st.Meta[h.name] = formatFloat(*h.f)
		} else {
			st.Meta[h.name] = strconv.FormatBool(*h.b)
		}
	}
	for i, bufs := range c.state {
		if bufs == nil {
			continue
		}
		st.Meta[fmt.Sprintf("state.%d.step", i)] = strconv.FormatInt(c.steps[i], 10)
		for k, name := range c.slots {
			st.Tensors[fmt.Sprintf("state.%d.%s", i, name)] = tensor.New(slices.Clone(bufs[k]), c.params[i].Shape()...)
		}
	}
	return st
}

// LoadStateDict replaces state and hyper-parameters with st. It parses
// everything before changing anything, so a bad state leaves the
// optimizer as it was.
func (c *core) LoadStateDict(st State) error {
	if kind := st.Meta["optimizer"]; kind != c.kind {
		return c.stateError("state is for optimizer %q", kind)
	}
	if n := st.Meta["params"]; n != strconv.Itoa(len(c.params)) {
		return c.stateError("state has %s parameters, optimizer has %d", n, len(c.params))
	}
	groups, err := c.parseGroups(st.Meta)
	if err != nil {
		return err
	}
	floats, bools, err := c.parseHypers(st.Meta)
	if err != nil {
		return err
	}
	state, steps, err := c.parseSlots(st)
	if err != nil {
		return err
	}
	c.groups = groups
	for k, h := range c.hypers {
		if h.f != nil {
			*h.f = floats[k]
		} else {
			*h.b = bools[k]
		}
	}
	c.state, c.steps = state, steps
	return nil
}

// stateError is an error about a state dict LoadStateDict refuses.
func (c *core) stateError(format string, args ...any) error {
	return fmt.Errorf("%w: %s: "+format, append([]any{ErrStateDict, c.kind}, args...)...)
}

// parseHypers reads every hyper-parameter from meta, indexed as c.hypers,
// refusing a structural one whose being zero differs from c's.
func (c *core) parseHypers(meta map[string]string) ([]float64, []bool, error) {
	floats := make([]float64, len(c.hypers))
	bools := make([]bool, len(c.hypers))
	var err error
	for k, h := range c.hypers {
		if h.f != nil {
			floats[k], err = metaFloat(meta, h.name)
		} else {
			bools[k], err = metaBool(meta, h.name)
		}
		if err != nil {
			return nil, nil, c.stateError("%v", err)
		}
		if h.name == c.structural && (floats[k] != 0) != (*h.f != 0) {
			return nil, nil, c.stateError("%s is %v in the state but %v here: construct the optimizer with the same %s", h.name, floats[k], *h.f, h.name)
		}
	}
	return floats, bools, nil
}

// parseSlots reads the per-parameter step counts and slot buffers of st,
// each buffer the shape of its parameter, refusing tensors that belong to
// no slot.
func (c *core) parseSlots(st State) ([][][]float32, []int64, error) {
	used := map[string]bool{}
	state := make([][][]float32, len(c.params))
	steps := make([]int64, len(c.params))
	for i, p := range c.params {
		key := fmt.Sprintf("state.%d.step", i)
		s, ok := st.Meta[key]
		if !ok {
			continue
		}
		var err error
		steps[i], err = strconv.ParseInt(s, 10, 64)
		if err != nil || steps[i] < 1 {
			return nil, nil, c.stateError("%s = %q is not a positive integer", key, s)
		}
		state[i] = make([][]float32, len(c.slots))
		for k, name := range c.slots {
			key := fmt.Sprintf("state.%d.%s", i, name)
			t := st.Tensors[key]
			if t == nil {
				return nil, nil, c.stateError("missing tensor %s", key)
			}
			if !slices.Equal(t.Shape(), p.Shape()) {
				return nil, nil, c.stateError("tensor %s has shape %v, parameter %d has %v", key, t.Shape(), i, p.Shape())
			}
			state[i][k] = slices.Clone(t.Data())
			used[key] = true
		}
	}
	if err := c.refuseUnused(st.Tensors, used); err != nil {
		return nil, nil, err
	}
	return state, steps, nil
}

// refuseUnused names, sorted, the tensors that are not used.
func (c *core) refuseUnused(tensors map[string]*tensor.Tensor, used map[string]bool) error {
	var unexpected []string
	for key := range tensors {
		if !used[key] {
			unexpected = append(unexpected, key)
		}
	}
	if len(unexpected) > 0 {
		slices.Sort(unexpected)
		return c.stateError("unexpected tensors %s", strings.Join(unexpected, ", "))
	}
	return nil
}

func metaFloat(meta map[string]string, key string) (float64, error) {
	s, ok := meta[key]
	if !ok {
		return 0, fmt.Errorf("missing %s", key)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s = %q is not a number", key, s)
	}
	return v, nil
}

func metaBool(meta map[string]string, key string) (bool, error) {
	s, ok := meta[key]
	if !ok {
		return false, fmt.Errorf("missing %s", key)
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s = %q is not a boolean", key, s)
	}
	return v, nil
}

func metaInt(meta map[string]string, key string) (int, error) {
	s, ok := meta[key]
	if !ok {
		return 0, fmt.Errorf("missing %s", key)
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s = %q is not an integer", key, s)
	}
	return v, nil
}

// Option sets an optimizer hyper-parameter. Giving an optimizer an option
// it does not have (Rho for SGD, say) panics, since it is a mistake in the
// program.
type Option func(*config)

// config holds every optimizer option; each constructor reads its own
// fields.
type config struct {
	lr                               float64 // a group's own, see LR
	hasLR                            bool
	momentum, dampening, weightDecay float64
	beta1, beta2, eps, rho           float64
	nesterov, maximize               bool
	option.Given
}

// Momentum sets SGD's momentum factor (default 0).
func Momentum(m float64) Option {
	return func(c *config) { c.momentum = m; c.Mark("Momentum") }
}

// Dampening sets SGD's dampening of the momentum (default 0).
func Dampening(d float64) Option {
	return func(c *config) { c.dampening = d; c.Mark("Dampening") }
}

// Nesterov enables SGD's Nesterov momentum; it needs a positive momentum
// and zero dampening.
func Nesterov(on bool) Option {
	return func(c *config) { c.nesterov = on; c.Mark("Nesterov") }
}

// WeightDecay sets the weight decay: an L2 penalty added to the gradient for
// SGD, Adam and Adadelta (default 0), decoupled for AdamW (default 0.01).
func WeightDecay(wd float64) Option {
	return func(c *config) { c.weightDecay = wd; c.Mark("WeightDecay") }
}

// Betas sets Adam's and AdamW's moment decay rates (default 0.9, 0.999).
func Betas(beta1, beta2 float64) Option {
	return func(c *config) { c.beta1, c.beta2 = beta1, beta2; c.Mark("Betas") }
}

// Eps sets the term added to denominators for numerical stability
// (default 1e-8 for Adam and AdamW, 1e-6 for Adadelta).
func Eps(eps float64) Option {
	return func(c *config) { c.eps = eps; c.Mark("Eps") }
}

// Rho sets Adadelta's decay rate of the running averages (default 0.9).
func Rho(rho float64) Option {
	return func(c *config) { c.rho = rho; c.Mark("Rho") }
}

// Maximize makes the optimizer ascend rather than descend the gradient.
func Maximize(on bool) Option {
	return func(c *config) { c.maximize = on; c.Mark("Maximize") }
}

// apply runs opts over c and panics if one of them is not in takes or
// sets an invalid value.
func (c config) apply(kind string, opts []Option, takes ...string) config {
	option.Apply("optim", kind, &c, &c.Given, opts, takes...)
	check := func(ok bool, what string, v float64) {
		if !ok {
			panic(fmt.Sprintf("optim: %s: invalid %s %v", kind, what, v))
		}
	}
	check(c.momentum >= 0, "momentum", c.momentum)
	check(c.weightDecay >= 0, "weight decay", c.weightDecay)
	check(c.eps >= 0, "eps", c.eps)
	check(c.beta1 >= 0 && c.beta1 < 1, "beta1", c.beta1)
	check(c.beta2 >= 0 && c.beta2 < 1, "beta2", c.beta2)
	check(c.rho >= 0 && c.rho <= 1, "rho", c.rho)
	return c
}
