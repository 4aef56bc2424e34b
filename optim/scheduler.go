package optim

import (
	"fmt"
	"math"
	"strconv"
)

// Scheduler changes an optimizer's learning rate once per epoch (or per
// step, as the training loop chooses), like torch.optim.lr_scheduler.
// Construction records the optimizer's current learning rate as the base
// rate; call Step after the optimizer's Step.
type Scheduler interface {
	// Step advances the schedule by one and sets the optimizer's rate.
	Step()
	// LastLR returns the learning rate the last Step set (the base rate
	// before the first Step).
	LastLR() float64
	// StateDict returns the schedule's position and settings.
	StateDict() State
	// LoadStateDict restores a state from StateDict of the same kind of
	// scheduler. It does not touch the optimizer, whose own state dict
	// carries its learning rate. On error the scheduler is unchanged.
	LoadStateDict(st State) error
}

// schedule is the state every scheduler shares.
type schedule struct {
	kind      string
	opt       Optimizer
	baseLR    float64
	lastEpoch int
	lastLR    float64
}

func newSchedule(kind string, opt Optimizer) schedule {
	if opt == nil {
		panic(fmt.Sprintf("optim: %s: nil optimizer", kind))
	}
	return schedule{kind: kind, opt: opt, baseLR: opt.LR(), lastLR: opt.LR()}
}

// LastLR returns the learning rate the last Step set.
func (s *schedule) LastLR() float64 { return s.lastLR }

func (s *schedule) meta() map[string]string {
	return map[string]string{
		"scheduler":  s.kind,
		"base_lr":    formatFloat(s.baseLR),
		"last_epoch": strconv.Itoa(s.lastEpoch),
		"last_lr":    formatFloat(s.lastLR),
	}
}

// load parses the shared fields and, if extra succeeds, commits them.
func (s *schedule) load(st State, extra func() error) error {
	wrap := func(err error) error { return fmt.Errorf("%w: %s: %v", ErrStateDict, s.kind, err) }
	if kind := st.Meta["scheduler"]; kind != s.kind {
		return wrap(fmt.Errorf("state is for scheduler %q", kind))
	}
	base, err := metaFloat(st.Meta, "base_lr")
	if err != nil {
		return wrap(err)
	}
	last, err := metaFloat(st.Meta, "last_lr")
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
	s.baseLR, s.lastLR, s.lastEpoch = base, last, epoch
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
	if s.lastEpoch%s.stepSize == 0 {
		s.opt.SetLR(s.opt.LR() * s.gamma)
	}
	s.lastLR = s.opt.LR()
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
func (s *CosineAnnealingLR) Step() {
	s.lastEpoch++
	lr := s.etaMin + (s.baseLR-s.etaMin)*(1+math.Cos(math.Pi*float64(s.lastEpoch)/float64(s.tMax)))/2
	s.opt.SetLR(lr)
	s.lastLR = lr
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
