package optim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Scheduler changes an optimizer's learning rate once per epoch (or per
// step, as the training loop chooses), like torch.optim.lr_scheduler.
// Construction records the optimizer's current learning rate as the base
// rate; call Step after the optimizer's Step.
type Scheduler interface {
	// Step advances the schedule by one and sets the optimizer's rate.
	Step()
	// LastLR returns the learning rate the last Step set in the first
	// parameter group (its rate at construction before the first Step).
	LastLR() float64
	// LastLRs returns the learning rate the last Step set in each group.
	LastLRs() []float64
	// StateDict returns the schedule's position and settings.
	StateDict() State
	// LoadStateDict restores a state from StateDict of the same kind of
	// scheduler. It does not touch the optimizer, whose own state dict
	// carries its learning rate. On error the scheduler is unchanged.
	LoadStateDict(st State) error
}

// schedule is the state every scheduler shares: the position and, per
// parameter group, the base rate it decays from and the rate it last set.
type schedule struct {
	kind      string
	opt       Optimizer
	baseLRs   []float64
	lastEpoch int
	lastLRs   []float64
}

// newSchedule records each group's base rate: the rate the optimizer's
// first scheduler found (torch's initial_lr), so that schedulers chained
// over one optimizer (see SequentialLR) all start from the same rates.
func newSchedule(kind string, opt Optimizer) schedule {
	if opt == nil {
		panic(fmt.Sprintf("optim: %s: nil optimizer", kind))
	}
	s := schedule{kind: kind, opt: opt}
	init, _ := opt.(interface{ initialLR(int) float64 })
	for g := range opt.NumGroups() {
		base := opt.GroupLR(g)
		if init != nil {
			base = init.initialLR(g)
		}
		s.baseLRs = append(s.baseLRs, base)
		s.lastLRs = append(s.lastLRs, opt.GroupLR(g))
	}
	return s
}

// LastLR returns the learning rate the last Step set (of the first
// parameter group; see LastLRs).
func (s *schedule) LastLR() float64 { return s.lastLRs[0] }

// LastLRs returns the learning rate the last Step set in each parameter
// group.
func (s *schedule) LastLRs() []float64 { return slices.Clone(s.lastLRs) }

// set gives every group g the rate lr(g) and records it.
func (s *schedule) set(lr func(g int) float64) {
	for g := range s.lastLRs {
		v := lr(g)
		s.opt.SetGroupLR(g, v)
		s.lastLRs[g] = v
	}
}

func (s *schedule) meta() map[string]string {
	return map[string]string{
		"scheduler":  s.kind,
		"base_lr":    formatFloats(s.baseLRs),
		"last_epoch": strconv.Itoa(s.lastEpoch),
		"last_lr":    formatFloats(s.lastLRs),
	}
}

// formatFloats joins vs with commas, each formatted to round-trip.
func formatFloats(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = formatFloat(v)
	}
	return strings.Join(parts, ",")
}

// metaFloats parses a list of formatFloats, which must have n values.
func metaFloats(meta map[string]string, key string, n int) ([]float64, error) {
	s, ok := meta[key]
	if !ok {
		return nil, fmt.Errorf("missing %s", key)
	}
	parts := strings.Split(s, ",")
	if len(parts) != n {
		return nil, fmt.Errorf("%s = %q has %d values for %d parameter groups", key, s, len(parts), n)
	}
	vs := make([]float64, n)
	for i, p := range parts {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return nil, fmt.Errorf("%s = %q is not a number", key, s)
		}
		vs[i] = v
	}
	return vs, nil
}

// load parses the shared fields and, if extra succeeds, commits them.
func (s *schedule) load(st State, extra func() error) error {
	wrap := func(err error) error { return fmt.Errorf("%w: %s: %v", ErrStateDict, s.kind, err) }
	if kind := st.Meta["scheduler"]; kind != s.kind {
		return wrap(fmt.Errorf("state is for scheduler %q", kind))
	}
	base, err := metaFloats(st.Meta, "base_lr", len(s.baseLRs))
	if err != nil {
		return wrap(err)
	}
	last, err := metaFloats(st.Meta, "last_lr", len(s.lastLRs))
	if err != nil {
		return wrap(err)
	}
	epoch, err := metaInt(st.Meta, "last_epoch")
	if err != nil {
		return wrap(err)
	}
	if err := extra(); err != nil {
		return wrap(err)
	}
	s.baseLRs, s.lastLRs, s.lastEpoch = base, last, epoch
	return nil
}

// StepLR multiplies the learning rate by gamma every stepSize steps, as
// torch.optim.lr_scheduler.StepLR.
type StepLR struct {
	schedule
	stepSize int
	gamma    float64
}

// NewStepLR returns a StepLR over opt. It panics if stepSize < 1 or gamma
// is negative or not finite.
func NewStepLR(opt Optimizer, stepSize int, gamma float64) *StepLR {
	if stepSize < 1 {
		panic(fmt.Sprintf("optim: StepLR: step size %d < 1", stepSize))
	}
	if !(gamma >= 0) || math.IsInf(gamma, 0) {
		panic(fmt.Sprintf("optim: StepLR: invalid gamma %v", gamma))
	}
	return &StepLR{schedule: newSchedule("StepLR", opt), stepSize: stepSize, gamma: gamma}
}

// Step advances the schedule; every stepSize-th call multiplies the
// optimizer's current rate by gamma (PyTorch's chainable form, so a rate
// changed by hand in between is respected).
func (s *StepLR) Step() {
	s.lastEpoch++
	s.set(func(g int) float64 {
		if s.lastEpoch%s.stepSize == 0 {
			return s.opt.GroupLR(g) * s.gamma
		}
		return s.opt.GroupLR(g)
	})
}

// restart sets the rates of epoch e by the closed form (SequentialLR's
// step(0) at a milestone).
func (s *StepLR) restart(e int) {
	s.lastEpoch = e
	s.set(func(g int) float64 { return s.baseLRs[g] * math.Pow(s.gamma, float64(e/s.stepSize)) })
}

// StateDict returns the schedule's position and settings.
func (s *StepLR) StateDict() State {
	m := s.meta()
	m["step_size"] = strconv.Itoa(s.stepSize)
	m["gamma"] = formatFloat(s.gamma)
	return State{Meta: m}
}

// LoadStateDict restores a state from StepLR.StateDict.
func (s *StepLR) LoadStateDict(st State) error {
	return s.load(st, func() error {
		size, err := metaInt(st.Meta, "step_size")
		if err != nil {
			return err
		}
		if size < 1 {
			return fmt.Errorf("step_size %d < 1", size)
		}
		gamma, err := metaFloat(st.Meta, "gamma")
		if err != nil {
			return err
		}
		s.stepSize, s.gamma = size, gamma
		return nil
	})
}

// CosineAnnealingLR anneals the learning rate from its base value to etaMin
// over tMax steps along a half cosine, by PyTorch's closed form
//
//	lr(t) = etaMin + (base − etaMin)·(1 + cos(π·t/tMax))/2
//
// and, like PyTorch, rises again after tMax steps (period 2·tMax).
type CosineAnnealingLR struct {
	schedule
	tMax   int
	etaMin float64
}

// NewCosineAnnealingLR returns a cosine schedule over opt. It panics if
// tMax < 1 or etaMin is negative or not finite.
func NewCosineAnnealingLR(opt Optimizer, tMax int, etaMin float64) *CosineAnnealingLR {
	if tMax < 1 {
		panic(fmt.Sprintf("optim: CosineAnnealingLR: T_max %d < 1", tMax))
	}
	if !(etaMin >= 0) || math.IsInf(etaMin, 0) {
		panic(fmt.Sprintf("optim: CosineAnnealingLR: invalid eta_min %v", etaMin))
	}
	return &CosineAnnealingLR{schedule: newSchedule("CosineAnnealingLR", opt), tMax: tMax, etaMin: etaMin}
}

// Step advances the schedule and sets the optimizer's rate.
func (s *CosineAnnealingLR) Step() { s.restart(s.lastEpoch + 1) }

// restart sets the rates of epoch e.
func (s *CosineAnnealingLR) restart(e int) {
	s.lastEpoch = e
	s.set(func(g int) float64 {
		return s.etaMin + (s.baseLRs[g]-s.etaMin)*(1+math.Cos(math.Pi*float64(e)/float64(s.tMax)))/2
	})
}

// StateDict returns the schedule's position and settings.
func (s *CosineAnnealingLR) StateDict() State {
	m := s.meta()
	m["T_max"] = strconv.Itoa(s.tMax)
	m["eta_min"] = formatFloat(s.etaMin)
	return State{Meta: m}
}

// LoadStateDict restores a state from CosineAnnealingLR.StateDict.
func (s *CosineAnnealingLR) LoadStateDict(st State) error {
	return s.load(st, func() error {
		tMax, err := metaInt(st.Meta, "T_max")
		if err != nil {
			return err
		}
		if tMax < 1 {
			return fmt.Errorf("T_max %d < 1", tMax)
		}
		etaMin, err := metaFloat(st.Meta, "eta_min")
		if err != nil {
			return err
		}
		if etaMin < 0 {
			return fmt.Errorf("eta_min %v < 0", etaMin)
		}
		s.tMax, s.etaMin = tMax, etaMin
		return nil
	})
}
