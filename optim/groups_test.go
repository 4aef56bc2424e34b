package optim

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/testfixture"
	"github.com/gotrain/gotrain/tensor"
)

// groupFixtures mirrors the parameter-group, clipping and per-batch
// schedule sections of testdata/optim_fixtures.json.
type groupFixtures struct {
	Grouped []struct {
		Name      string         `json:"name"`
		Optimizer string         `json:"optimizer"`
		LR        float64        `json:"lr"`
		Options   map[string]any `json:"options"`
		Groups    []struct {
			Params  []int          `json:"params"`
			Options map[string]any `json:"options"`
		} `json:"groups"`
		Shapes [][]int       `json:"shapes"`
		Init   [][]float32   `json:"init"`
		Grads  [][][]float32 `json:"grads"`
		Params [][][]float64 `json:"params"`
	} `json:"grouped"`
	Clips []struct {
		Name    string      `json:"name"`
		MaxNorm float64     `json:"max_norm"`
		Shapes  [][]int     `json:"shapes"`
		Grads   [][]float32 `json:"grads"`
		Norm    float64     `json:"norm"`
		Clipped [][]float64 `json:"clipped"`
	} `json:"clips"`
	Schedules []struct {
		Name    string      `json:"name"`
		BaseLRs []float64   `json:"base_lrs"`
		LRs     [][]float64 `json:"lrs"`
	} `json:"schedules"`
}

// groupOptions maps a param group's torch keys to Options.
func groupOptions(t *testing.T, kw map[string]any) []Option {
	var opts []Option
	for k, v := range kw {
		switch k {
		case "lr":
			opts = append(opts, LR(v.(float64)))
		case "weight_decay":
			opts = append(opts, WeightDecay(v.(float64)))
		default:
			t.Fatalf("unknown group option %q", k)
		}
	}
	return opts
}

func TestParamGroupsMatchTorch(t *testing.T) {
	f := testfixture.Load[groupFixtures](t, "optim_fixtures.json")
	if len(f.Grouped) == 0 {
		t.Fatal("no grouped fixtures")
	}
	for _, c := range f.Grouped {
		t.Run(c.Name, func(t *testing.T) {
			params := make([]*tensor.Tensor, len(c.Shapes))
			for i, s := range c.Shapes {
				params[i] = tensor.New(append([]float32(nil), c.Init[i]...), s...).SetRequiresGrad(true)
			}
			pick := func(idx []int) []*tensor.Tensor {
				var ps []*tensor.Tensor
				for _, i := range idx {
					ps = append(ps, params[i])
				}
				return ps
			}
			// The constructor's parameters are group 0, with its options.
			if len(c.Groups[0].Options) != 0 {
				t.Fatalf("fixture's first group has options %v", c.Groups[0].Options)
			}
			opt := newByName(t, c.Optimizer, pick(c.Groups[0].Params), c.LR, optionsFromTorch(t, c.Options))
			for _, g := range c.Groups[1:] {
				opt.AddParamGroup(pick(g.Params), groupOptions(t, g.Options)...)
			}
			if opt.NumGroups() != len(c.Groups) {
				t.Fatalf("NumGroups %d, want %d", opt.NumGroups(), len(c.Groups))
			}
			for step, grads := range c.Grads {
				for i, g := range grads {
					params[i].SetGrad(tensor.New(append([]float32(nil), g...), c.Shapes[i]...))
				}
				opt.Step()
				for i, p := range params {
					for j, got := range p.Data() {
						if want := c.Params[step][i][j]; !closeRel(float64(got), want, 1e-5) {
							t.Fatalf("step %d param %d [%d]: got %.9g, torch %.9g", step+1, i, j, got, want)
						}
					}
				}
			}
		})
	}
}

func TestClipGradNormMatchesTorch(t *testing.T) {
	f := testfixture.Load[groupFixtures](t, "optim_fixtures.json")
	if len(f.Clips) == 0 {
		t.Fatal("no clipping fixtures")
	}
	for _, c := range f.Clips {
		t.Run(c.Name, func(t *testing.T) {
			params := make([]*tensor.Tensor, len(c.Shapes))
			for i, s := range c.Shapes {
				params[i] = tensor.Zeros(s...).SetRequiresGrad(true)
				if c.Grads[i] != nil {
					params[i].SetGrad(tensor.New(append([]float32(nil), c.Grads[i]...), s...))
				}
			}
			norm := ClipGradNorm(params, c.MaxNorm)
			if !closeRel(norm, c.Norm, 1e-6) {
				t.Fatalf("norm %.9g, torch %.9g", norm, c.Norm)
			}
			for i, p := range params {
				if c.Clipped[i] == nil {
					if p.Grad() != nil {
						t.Fatalf("param %d: got a gradient where there was none", i)
					}
					continue
				}
				for j, got := range p.Grad().Data() {
					want := c.Clipped[i][j]
					if math.Abs(float64(got)-want) > 1e-6*math.Max(math.Abs(want), 1e-3) {
						t.Fatalf("param %d [%d]: clipped grad %.9g, torch %.9g", i, j, got, want)
					}
				}
			}
		})
	}
}

// fixtureSchedule builds the scheduler the fixture case name was made with
// in gen_fixtures.py.
func fixtureSchedule(t *testing.T, name string, opt Optimizer) Scheduler {
	switch name {
	case "lambda_exp":
		return NewLambdaLR(opt, func(e int) float64 { return math.Pow(0.9, float64(e)) })
	case "linear_warmup":
		return NewLinearLR(opt, 0.1, 1, 8)
	case "linear_decay":
		return NewLinearLR(opt, 1, 0.2, 12)
	case "warmup_cosine":
		warm := NewLinearLR(opt, 0.01, 1, 10)
		cos := NewCosineAnnealingLR(opt, 20, 1e-4)
		return NewSequentialLR(opt, []Scheduler{warm, cos}, []int{10})
	case "three_stage":
		a := NewLinearLR(opt, 0.5, 1, 4)
		b := NewStepLR(opt, 3, 0.5)
		c := NewLambdaLR(opt, func(e int) float64 { return 1 / (1 + float64(e)) })
		return NewSequentialLR(opt, []Scheduler{a, b, c}, []int{5, 12})
	case "onecycle_cos":
		return NewOneCycleLR(opt, OneCycle{MaxLR: 0.01, TotalSteps: 30})
	case "onecycle_linear":
		return NewOneCycleLR(opt, OneCycle{MaxLR: 0.5, TotalSteps: 25, PctStart: 0.4, Linear: true, DivFactor: 10, FinalDivFactor: 100})
	}
	t.Fatalf("unknown schedule %q", name)
	return nil
}

func TestPerBatchSchedulesMatchTorch(t *testing.T) {
	f := testfixture.Load[groupFixtures](t, "optim_fixtures.json")
	if len(f.Schedules) == 0 {
		t.Fatal("no schedule fixtures")
	}
	for _, c := range f.Schedules {
		t.Run(c.Name, func(t *testing.T) {
			opt := NewAdamW([]*tensor.Tensor{tensor.Zeros(1)}, c.BaseLRs[0])
			for _, lr := range c.BaseLRs[1:] {
				opt.AddParamGroup([]*tensor.Tensor{tensor.Zeros(1)}, LR(lr))
			}
			s := fixtureSchedule(t, c.Name, opt)
			check := func(step int, want []float64) {
				t.Helper()
				got := s.LastLRs()
				for g, w := range want {
					if math.Abs(got[g]-w) > 1e-9*math.Max(math.Abs(w), 1e-6) {
						t.Fatalf("step %d group %d: lr %.12g, torch %.12g", step, g, got[g], w)
					}
					if opt.GroupLR(g) != got[g] {
						t.Fatalf("step %d group %d: optimizer lr %v != LastLRs %v", step, g, opt.GroupLR(g), got[g])
					}
				}
			}
			check(0, c.LRs[0])
			for i, want := range c.LRs[1:] {
				s.Step()
				check(i+1, want)
			}
		})
	}
}

// TestSchedulesResume checks that a per-batch schedule saved midway and
// loaded into a fresh one carries on with the same rates.
func TestSchedulesResume(t *testing.T) {
	for _, name := range []string{"lambda_exp", "linear_warmup", "warmup_cosine", "three_stage", "onecycle_cos"} {
		t.Run(name, func(t *testing.T) {
			mk := func() (*AdamW, Scheduler) {
				opt := NewAdamW([]*tensor.Tensor{tensor.Zeros(1)}, 0.01)
				opt.AddParamGroup([]*tensor.Tensor{tensor.Zeros(1)}, LR(0.02))
				return opt, fixtureSchedule(t, name, opt)
			}
			opt, s := mk()
			for range 13 {
				s.Step()
			}
			ost, sst := opt.StateDict(), s.StateDict()
			opt2, s2 := mk()
			if err := opt2.LoadStateDict(ost); err != nil {
				t.Fatal(err)
			}
			if err := s2.LoadStateDict(sst); err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				s.Step()
				s2.Step()
				if a, b := s.LastLRs(), s2.LastLRs(); a[0] != b[0] || a[1] != b[1] || opt2.GroupLR(1) != b[1] {
					t.Fatalf("step %d after resume: %v, resumed %v", i+1, a, b)
				}
			}
		})
	}
}

func TestParamGroupsStateDict(t *testing.T) {
	a, b, c := tensor.Zeros(2).SetRequiresGrad(true), tensor.Zeros(3).SetRequiresGrad(true), tensor.Zeros(1).SetRequiresGrad(true)
	opt := NewAdamW([]*tensor.Tensor{a}, 0.1, WeightDecay(0.1))
	opt.AddParamGroup([]*tensor.Tensor{b, c}, WeightDecay(0), LR(0.05))
	if opt.GroupWeightDecay(1) != 0 || opt.GroupLR(1) != 0.05 || opt.LR() != 0.1 {
		t.Fatalf("groups: lr %v/%v wd %v", opt.LR(), opt.GroupLR(1), opt.GroupWeightDecay(1))
	}
	st := opt.StateDict()
	if st.Meta["param_groups"] != "2" || st.Meta["param_groups.1.lr"] != "0.05" || st.Meta["param_groups.1.weight_decay"] != "0" || st.Meta["weight_decay"] != "0.1" {
		t.Fatalf("meta %v", st.Meta)
	}
	fresh := NewAdamW([]*tensor.Tensor{a}, 0.3)
	fresh.AddParamGroup([]*tensor.Tensor{b, c})
	if err := fresh.LoadStateDict(st); err != nil {
		t.Fatal(err)
	}
	if fresh.GroupLR(1) != 0.05 || fresh.GroupWeightDecay(0) != 0.1 {
		t.Fatalf("loaded: lr %v wd %v", fresh.GroupLR(1), fresh.GroupWeightDecay(0))
	}
	one := NewAdamW([]*tensor.Tensor{a, b, c}, 0.1)
	if err := one.LoadStateDict(st); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), "2 parameter groups") {
		t.Fatalf("one group from two: err %v", err)
	}
	other := NewAdamW([]*tensor.Tensor{a, b}, 0.1)
	other.AddParamGroup([]*tensor.Tensor{c})
	if err := other.LoadStateDict(st); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), "parameter group 1 has 2 parameters") {
		t.Fatalf("other sizes: err %v", err)
	}
}

func TestParamGroupMistakesPanic(t *testing.T) {
	a, b := tensor.Zeros(2), tensor.Zeros(3)
	expectPanic(t, "parameter 1 is also parameter 0", func() {
		NewAdamW([]*tensor.Tensor{a}, 0.1).AddParamGroup([]*tensor.Tensor{a})
	})
	expectPanic(t, "does not take option Betas", func() {
		NewAdamW([]*tensor.Tensor{a}, 0.1).AddParamGroup([]*tensor.Tensor{b}, Betas(0.9, 0.9))
	})
	expectPanic(t, "invalid learning rate -1", func() {
		NewAdamW([]*tensor.Tensor{a}, 0.1).AddParamGroup([]*tensor.Tensor{b}, LR(-1))
	})
	expectPanic(t, "does not take option LR", func() { NewAdamW([]*tensor.Tensor{a}, 0.1, LR(1)) })
	expectPanic(t, "parameter group 2 of 1", func() { NewSGD([]*tensor.Tensor{a}, 0.1).GroupLR(2) })
	opt := NewSGD([]*tensor.Tensor{a}, 0.1)
	expectPanic(t, "need 1 milestones, got 0", func() {
		NewSequentialLR(opt, []Scheduler{NewLinearLR(opt, 0.5, 1, 2), NewStepLR(opt, 1, 0.5)}, nil)
	})
	expectPanic(t, "start factor 0", func() { NewLinearLR(opt, 0, 1, 3) })
	expectPanic(t, "step 3 past the 2 total steps", func() {
		s := NewOneCycleLR(opt, OneCycle{MaxLR: 1, TotalSteps: 2})
		for range 3 {
			s.Step()
		}
	})
	expectPanic(t, "invalid max norm -1", func() { ClipGradNorm(nil, -1) })
}
