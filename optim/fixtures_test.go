package optim

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/testfixture"
	"github.com/gotrain/gotrain/tensor"
)

// fixtures mirrors testdata/optim_fixtures.json, written by
// testdata/gen_fixtures.py with torch.optim.
type fixtures struct {
	Optimizers []struct {
		Name      string         `json:"name"`
		Optimizer string         `json:"optimizer"`
		LR        float64        `json:"lr"`
		Options   map[string]any `json:"options"`
		Shapes    [][]int        `json:"shapes"`
		Init      [][]float32    `json:"init"`
		Grads     [][][]float32  `json:"grads"`
		Params    [][][]float64  `json:"params"`
	} `json:"optimizers"`
	Schedulers []struct {
		Name      string         `json:"name"`
		Scheduler string         `json:"scheduler"`
		BaseLR    float64        `json:"base_lr"`
		Options   map[string]any `json:"options"`
		LRs       []float64      `json:"lrs"`
	} `json:"schedulers"`
}

func loadFixtures(t *testing.T) *fixtures {
	t.Helper()
	return testfixture.Load[fixtures](t, "optim_fixtures.json")
}

// optionsFromTorch maps torch.optim keyword arguments to Options.
func optionsFromTorch(t *testing.T, kw map[string]any) []Option {
	t.Helper()
	var opts []Option
	for k, v := range kw {
		switch k {
		case "momentum":
			opts = append(opts, Momentum(v.(float64)))
		case "dampening":
			opts = append(opts, Dampening(v.(float64)))
		case "nesterov":
			opts = append(opts, Nesterov(v.(bool)))
		case "weight_decay":
			opts = append(opts, WeightDecay(v.(float64)))
		case "maximize":
			opts = append(opts, Maximize(v.(bool)))
		case "eps":
			opts = append(opts, Eps(v.(float64)))
		case "rho":
			opts = append(opts, Rho(v.(float64)))
		case "betas":
			b := v.([]any)
			opts = append(opts, Betas(b[0].(float64), b[1].(float64)))
		default:
			t.Fatalf("unknown torch option %q", k)
		}
	}
	return opts
}

func newByName(t *testing.T, name string, params []*tensor.Tensor, lr float64, opts []Option) Optimizer {
	t.Helper()
	switch name {
	case "SGD":
		return NewSGD(params, lr, opts...)
	case "Adam":
		return NewAdam(params, lr, opts...)
	case "AdamW":
		return NewAdamW(params, lr, opts...)
	case "Adadelta":
		return NewAdadelta(params, lr, opts...)
	}
	t.Fatalf("unknown optimizer %q", name)
	return nil
}

// closeRel reports whether got is within rel of want. Values nearer zero
// than 0.1 (the parameters are of order 1) are compared at rel·0.1, since
// float32 cancellation leaves them an absolute, not a relative, error.
func closeRel(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 0.1)
}

func TestOptimizersMatchTorch(t *testing.T) {
	f := loadFixtures(t)
	if len(f.Optimizers) == 0 {
		t.Fatal("no optimizer fixtures")
	}
	for _, c := range f.Optimizers {
		t.Run(c.Name, func(t *testing.T) {
			params := make([]*tensor.Tensor, len(c.Shapes))
			for i, s := range c.Shapes {
				params[i] = tensor.New(append([]float32(nil), c.Init[i]...), s...).SetRequiresGrad(true)
			}
			opt := newByName(t, c.Optimizer, params, c.LR, optionsFromTorch(t, c.Options))
			for step, grads := range c.Grads {
				for i, g := range grads {
					if g == nil {
						params[i].SetGrad(nil)
					} else {
						params[i].SetGrad(tensor.New(append([]float32(nil), g...), c.Shapes[i]...))
					}
				}
				opt.Step()
				for i, p := range params {
					for j, got := range p.Data() {
						want := c.Params[step][i][j]
						if !closeRel(float64(got), want, 1e-5) {
							t.Fatalf("step %d param %d [%d]: got %.9g, torch %.9g", step+1, i, j, got, want)
						}
					}
				}
			}
		})
	}
}

func TestSchedulersMatchTorch(t *testing.T) {
	f := loadFixtures(t)
	if len(f.Schedulers) == 0 {
		t.Fatal("no scheduler fixtures")
	}
	for _, c := range f.Schedulers {
		t.Run(c.Name, func(t *testing.T) {
			opt := NewSGD([]*tensor.Tensor{tensor.Zeros(1)}, c.BaseLR)
			var s Scheduler
			switch c.Scheduler {
			case "StepLR":
				s = NewStepLR(opt, int(c.Options["step_size"].(float64)), c.Options["gamma"].(float64))
			case "CosineAnnealingLR":
				etaMin, _ := c.Options["eta_min"].(float64)
				s = NewCosineAnnealingLR(opt, int(c.Options["T_max"].(float64)), etaMin)
			default:
				t.Fatalf("unknown scheduler %q", c.Scheduler)
			}
			for i, want := range c.LRs {
				s.Step()
				if got := s.LastLR(); math.Abs(got-want) > 1e-9*math.Max(math.Abs(want), 1e-3) {
					t.Fatalf("step %d: LastLR %.12g, torch %.12g", i+1, got, want)
				}
				if opt.LR() != s.LastLR() {
					t.Fatalf("step %d: optimizer lr %v != LastLR %v", i+1, opt.LR(), s.LastLR())
				}
			}
		})
	}
}
