package optim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// restarter is a scheduler that can jump to epoch e by its closed form, as
// SequentialLR needs at a milestone (PyTorch calls step(0) there).
type restarter interface {
	Scheduler
	restart(e int)
}

// LambdaLR sets each group's rate to its base rate times f(step), as
// torch.optim.lr_scheduler.LambdaLR; f(0) applies at construction. Its
// state dict holds the position, not f: the program supplies f again.
type LambdaLR struct {
	schedule
	f func(step int) float64
}

// NewLambdaLR returns a LambdaLR over opt and sets the rates of step 0.
// It panics if f is nil.
func NewLambdaLR(opt Optimizer, f func(step int) float64) *LambdaLR {
	if f == nil {
		panic("optim: LambdaLR: nil function")
	}
	s := &LambdaLR{schedule: newSchedule("LambdaLR", opt), f: f}
	s.restart(0)
	return s
}

// Step advances the schedule and sets the optimizer's rates.
func (s *LambdaLR) Step() { s.restart(s.lastEpoch + 1) }

func (s *LambdaLR) restart(e int) {
	s.lastEpoch = e
	factor := s.f(e)
	s.set(func(g int) float64 { return s.baseLRs[g] * factor })
}

// StateDict returns the schedule's position.
func (s *LambdaLR) StateDict() State { return State{Meta: s.meta()} }

// LoadStateDict restores a state from LambdaLR.StateDict.
func (s *LambdaLR) LoadStateDict(st State) error {
	return s.load(st, func() error { return nil })
}

// LinearLR multiplies each group's base rate by a factor that moves
// linearly from start to end over totalIters steps and then stays at
// end, as torch.optim.lr_scheduler.LinearLR: the usual linear warm-up is
// NewLinearLR(opt, 1.0/warmup, 1, warmup).
type LinearLR struct {
	schedule
	start, end float64
	total      int
}

// NewLinearLR returns a LinearLR over opt and sets the rates of step 0
// (base·start). It panics, like PyTorch, unless 0 < start <= 1 and
// 0 <= end <= 1, or if totalIters < 1.
func NewLinearLR(opt Optimizer, start, end float64, totalIters int) *LinearLR {
	if !(start > 0 && start <= 1) {
		panic(fmt.Sprintf("optim: LinearLR: start factor %v: want 0 < start <= 1", start))
	}
	if !(end >= 0 && end <= 1) {
		panic(fmt.Sprintf("optim: LinearLR: end factor %v: want 0 <= end <= 1", end))
	}
	if totalIters < 1 {
		panic(fmt.Sprintf("optim: LinearLR: total iterations %d < 1", totalIters))
	}
	s := &LinearLR{schedule: newSchedule("LinearLR", opt), start: start, end: end, total: totalIters}
	s.restart(0)
	return s
}

// Step advances the schedule and sets the optimizer's rates.
func (s *LinearLR) Step() { s.restart(s.lastEpoch + 1) }

func (s *LinearLR) restart(e int) {
	s.lastEpoch = e
	factor := s.start + (s.end-s.start)*float64(min(e, s.total))/float64(s.total)
	s.set(func(g int) float64 { return s.baseLRs[g] * factor })
}

// StateDict returns the schedule's position and settings.
func (s *LinearLR) StateDict() State {
	m := s.meta()
	m["start_factor"] = formatFloat(s.start)
	m["end_factor"] = formatFloat(s.end)
	m["total_iters"] = strconv.Itoa(s.total)
	return State{Meta: m}
}

// LoadStateDict restores a state from LinearLR.StateDict.
func (s *LinearLR) LoadStateDict(st State) error {
	return s.load(st, func() error {
		start, err := metaFloat(st.Meta, "start_factor")
		if err != nil {
			return err
		}
		end, err := metaFloat(st.Meta, "end_factor")
		if err != nil {
			return err
		}
		total, err := metaInt(st.Meta, "total_iters")
		if err != nil {
			return err
		}
		if total < 1 {
			return fmt.Errorf("total_iters %d < 1", total)
		}
		s.start, s.end, s.total = start, end, total
		return nil
	})
}

// SequentialLR runs schedulers one after another over one optimizer, as
// torch.optim.lr_scheduler.SequentialLR: scheduler i+1 takes over at step
// milestones[i], starting from its own step 0. Warm-up then cosine decay:
//
//	warm := optim.NewLinearLR(opt, 0.01, 1, 100)
//	cos := optim.NewCosineAnnealingLR(opt, steps-100, lr/10)
//	sched := optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{100})
type SequentialLR struct {
	opt        Optimizer
	scheds     []restarter
	milestones []int
	lastEpoch  int
	lastLRs    []float64
}

// NewSequentialLR returns the sequence and sets the rates of the first
// scheduler's step 0. It panics unless there is one milestone fewer than
// schedulers, the milestones increase, and every scheduler is one of this
// package's over opt.
func NewSequentialLR(opt Optimizer, schedulers []Scheduler, milestones []int) *SequentialLR {
	if opt == nil {
		panic("optim: SequentialLR: nil optimizer")
	}
	if len(schedulers) == 0 || len(milestones) != len(schedulers)-1 {
		panic(fmt.Sprintf("optim: SequentialLR: %d schedulers need %d milestones, got %d", len(schedulers), max(len(schedulers)-1, 0), len(milestones)))
	}
	for i := 1; i < len(milestones); i++ {
		if milestones[i] <= milestones[i-1] {
			panic(fmt.Sprintf("optim: SequentialLR: milestones %v do not increase", milestones))
		}
	}
	s := &SequentialLR{opt: opt, milestones: slices.Clone(milestones)}
	for i, sc := range schedulers {
		r, ok := sc.(restarter)
		if !ok || schedOptimizer(sc) != opt {
			panic(fmt.Sprintf("optim: SequentialLR: scheduler %d (%T) is not a scheduler of this package over the sequence's optimizer", i, sc))
		}
		s.scheds = append(s.scheds, r)
	}
	s.scheds[0].restart(0)
	s.lastLRs = s.scheds[0].LastLRs()
	return s
}

// schedOptimizer returns the optimizer of one of this package's
// schedulers, nil for another.
func schedOptimizer(sc Scheduler) Optimizer {
	if o, ok := sc.(interface{ optimizer() Optimizer }); ok {
		return o.optimizer()
	}
	return nil
}

func (s *schedule) optimizer() Optimizer { return s.opt }

func (s *SequentialLR) optimizer() Optimizer { return s.opt }

// Step advances the sequence: the scheduler whose span holds the new step
// steps, or restarts at its step 0 on its milestone.
func (s *SequentialLR) Step() {
	s.lastEpoch++
	idx := sort.SearchInts(s.milestones, s.lastEpoch+1) // bisect_right
	sc := s.scheds[idx]
	if idx > 0 && s.milestones[idx-1] == s.lastEpoch {
		sc.restart(0)
	} else {
		sc.Step()
	}
	s.lastLRs = sc.LastLRs()
}

// LastLR returns the rate the last Step set in the first group.
func (s *SequentialLR) LastLR() float64 { return s.lastLRs[0] }

// LastLRs returns the rate the last Step set in each group.
func (s *SequentialLR) LastLRs() []float64 { return slices.Clone(s.lastLRs) }

// StateDict returns the sequence's position and every scheduler's state,
// the i-th's keys prefixed with "<i>.".
func (s *SequentialLR) StateDict() State {
	m := map[string]string{
		"scheduler":  "SequentialLR",
		"last_epoch": strconv.Itoa(s.lastEpoch),
		"last_lr":    formatFloats(s.lastLRs),
		"schedulers": strconv.Itoa(len(s.scheds)),
	}
	for i, sc := range s.scheds {
		for k, v := range sc.StateDict().Meta {
			m[fmt.Sprintf("%d.%s", i, k)] = v
		}
	}
	return State{Meta: m}
}

// LoadStateDict restores a state from SequentialLR.StateDict over the same
// kinds of schedulers. On error nothing changes.
func (s *SequentialLR) LoadStateDict(st State) error {
	wrap := func(err error) error { return fmt.Errorf("%w: SequentialLR: %v", ErrStateDict, err) }
	if kind := st.Meta["scheduler"]; kind != "SequentialLR" {
		return wrap(fmt.Errorf("state is for scheduler %q", kind))
	}
	if n := st.Meta["schedulers"]; n != strconv.Itoa(len(s.scheds)) {
		return wrap(fmt.Errorf("state has %s schedulers, the sequence %d", n, len(s.scheds)))
	}
	epoch, err := metaInt(st.Meta, "last_epoch")
	if err != nil {
		return wrap(err)
	}
	last, err := metaFloats(st.Meta, "last_lr", len(s.lastLRs))
	if err != nil {
		return wrap(err)
	}
	subs := make([]map[string]string, len(s.scheds))
	for i := range subs {
		subs[i] = map[string]string{}
	}
	for k, v := range st.Meta {
		i, rest, ok := strings.Cut(k, ".")
		if n, err := strconv.Atoi(i); ok && err == nil && n >= 0 && n < len(subs) {
			subs[n][rest] = v
		}
	}
	// Load into copies first so that a bad state changes nothing.
	saved := make([]State, len(s.scheds))
	for i, sc := range s.scheds {
		saved[i] = sc.StateDict()
	}
	for i, sc := range s.scheds {
		if err := sc.LoadStateDict(State{Meta: subs[i]}); err != nil {
			for j := range i {
				_ = s.scheds[j].LoadStateDict(saved[j]) // came from StateDict: loads
			}
			return wrap(fmt.Errorf("scheduler %d: %w", i, err))
		}
	}
	s.lastEpoch, s.lastLRs = epoch, last
	return nil
}

// OneCycle configures a OneCycleLR. The zero value of each optional field
// means PyTorch's default.
type OneCycle struct {
	MaxLR      float64 // the peak rate, required
	TotalSteps int     // steps in the cycle, required
	// PctStart is the fraction of the cycle spent rising (default 0.3).
	PctStart float64
	// DivFactor sets the initial rate MaxLR/DivFactor (default 25).
	DivFactor float64
	// FinalDivFactor sets the final rate initial/FinalDivFactor
	// (default 1e4).
	FinalDivFactor float64
	// Linear anneals along straight lines instead of half cosines.
	Linear bool
}

// OneCycleLR is torch.optim.lr_scheduler.OneCycleLR with
// cycle_momentum=False and three_phase=False: the rate rises from
// MaxLR/DivFactor to MaxLR over the first PctStart of TotalSteps, then
// anneals to initial/FinalDivFactor, stepped once per batch. It sets every
// group's rate alike.
type OneCycleLR struct {
	schedule
	cfg              OneCycle
	initial, minimum float64
}

// NewOneCycleLR returns the schedule over opt and sets its initial rate.
// It panics on a MaxLR that is not positive, TotalSteps < 1, PctStart
// outside (0, 1) or a non-positive divisor.
func NewOneCycleLR(opt Optimizer, cfg OneCycle) *OneCycleLR {
	if cfg.PctStart == 0 {
		cfg.PctStart = 0.3
	}
	if cfg.DivFactor == 0 {
		cfg.DivFactor = 25
	}
	if cfg.FinalDivFactor == 0 {
		cfg.FinalDivFactor = 1e4
	}
	switch {
	case !(cfg.MaxLR > 0) || math.IsInf(cfg.MaxLR, 0):
		panic(fmt.Sprintf("optim: OneCycleLR: invalid MaxLR %v", cfg.MaxLR))
	case cfg.TotalSteps < 1:
		panic(fmt.Sprintf("optim: OneCycleLR: TotalSteps %d < 1", cfg.TotalSteps))
	case !(cfg.PctStart > 0 && cfg.PctStart < 1):
		panic(fmt.Sprintf("optim: OneCycleLR: PctStart %v outside (0, 1)", cfg.PctStart))
	case !(cfg.DivFactor > 0) || !(cfg.FinalDivFactor > 0):
		panic(fmt.Sprintf("optim: OneCycleLR: invalid DivFactor %v or FinalDivFactor %v", cfg.DivFactor, cfg.FinalDivFactor))
	}
	s := &OneCycleLR{schedule: newSchedule("OneCycleLR", opt), cfg: cfg}
	s.initial = cfg.MaxLR / cfg.DivFactor
	s.minimum = s.initial / cfg.FinalDivFactor
	for g := range s.baseLRs {
		s.baseLRs[g] = s.initial
	}
	s.restart(0)
	return s
}

// Step advances the cycle. Stepping past TotalSteps panics, as in
// PyTorch: the loop ran more steps than the schedule was made for.
func (s *OneCycleLR) Step() { s.restart(s.lastEpoch + 1) }

func (s *OneCycleLR) restart(e int) {
	if e > s.cfg.TotalSteps {
		panic(fmt.Sprintf("optim: OneCycleLR: step %d past the %d total steps", e, s.cfg.TotalSteps))
	}
	s.lastEpoch = e
	lr := s.at(float64(e))
	s.set(func(int) float64 { return lr })
}

// at is PyTorch's get_lr for step t: the phase holding t (or the last),
// annealed from its start to its end rate.
func (s *OneCycleLR) at(t float64) float64 {
	up := s.cfg.PctStart*float64(s.cfg.TotalSteps) - 1
	down := float64(s.cfg.TotalSteps) - 1
	from, to, start, end := s.initial, s.cfg.MaxLR, 0.0, up
	if t > up {
		from, to, start, end = s.cfg.MaxLR, s.minimum, up, down
	}
	pct := (t - start) / (end - start)
	if s.cfg.Linear {
		return (to-from)*pct + from
	}
	return to + (from-to)/2*(math.Cos(math.Pi*pct)+1)
}

// StateDict returns the cycle's position and settings.
func (s *OneCycleLR) StateDict() State {
	m := s.meta()
	m["max_lr"] = formatFloat(s.cfg.MaxLR)
	m["total_steps"] = strconv.Itoa(s.cfg.TotalSteps)
	m["pct_start"] = formatFloat(s.cfg.PctStart)
	m["div_factor"] = formatFloat(s.cfg.DivFactor)
	m["final_div_factor"] = formatFloat(s.cfg.FinalDivFactor)
	m["anneal_strategy"] = map[bool]string{false: "cos", true: "linear"}[s.cfg.Linear]
	return State{Meta: m}
}

// LoadStateDict restores a state from OneCycleLR.StateDict, which must
// have the same settings.
func (s *OneCycleLR) LoadStateDict(st State) error {
	return s.load(st, func() error {
		if got, want := st.Meta["max_lr"]+" "+st.Meta["total_steps"]+" "+st.Meta["pct_start"]+" "+st.Meta["anneal_strategy"],
			s.StateDict().Meta; got != want["max_lr"]+" "+want["total_steps"]+" "+want["pct_start"]+" "+want["anneal_strategy"] {
			return fmt.Errorf("state's cycle (max_lr total_steps pct_start anneal) %q differs from this one's", got)
		}
		return nil
	})
}
