package optim

import (
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// ref is a float64 reference implementation of one torch.optim algorithm,
// written from PyTorch's documented update, independent of the fused loops.
type ref struct {
	p, m, v []float64
	step    int
}

type refCase struct {
	name  string
	newGo func(params []*tensor.Tensor) Optimizer
	lr    float64
	step  func(r *ref, g []float64, lr float64)
}

func refCases() []refCase {
	return []refCase{
		{"sgd_plain", func(p []*tensor.Tensor) Optimizer { return NewSGD(p, 0.1) }, 0.1,
			sgdRef(0, 0, 0, false)},
		{"sgd_momentum_dampening_wd", func(p []*tensor.Tensor) Optimizer {
			return NewSGD(p, 0.05, Momentum(0.9), Dampening(0.2), WeightDecay(0.01))
		}, 0.05, sgdRef(0.9, 0.2, 0.01, false)},
		{"sgd_nesterov", func(p []*tensor.Tensor) Optimizer {
			return NewSGD(p, 0.05, Momentum(0.9), Nesterov(true), WeightDecay(1e-3))
		}, 0.05, sgdRef(0.9, 0, 1e-3, true)},
		{"adam", func(p []*tensor.Tensor) Optimizer { return NewAdam(p, 0.01, WeightDecay(0.05)) }, 0.01,
			adamRef(0.9, 0.999, 1e-8, 0.05, false)},
		{"adamw", func(p []*tensor.Tensor) Optimizer { return NewAdamW(p, 0.01, Betas(0.8, 0.99)) }, 0.01,
			adamRef(0.8, 0.99, 1e-8, 0.01, true)},
		{"adadelta", func(p []*tensor.Tensor) Optimizer { return NewAdadelta(p, 1.0, WeightDecay(0.01)) }, 1.0,
			adadeltaRef(0.9, 1e-6, 0.01)},
	}
}

func sgdRef(mu, damp, wd float64, nesterov bool) func(*ref, []float64, float64) {
	return func(r *ref, g []float64, lr float64) {
		r.step++
		for i := range r.p {
			d := g[i] + wd*r.p[i]
			if mu != 0 {
				if r.step == 1 {
					r.m[i] = d
				} else {
					r.m[i] = mu*r.m[i] + (1-damp)*d
				}
				if nesterov {
					d += mu * r.m[i]
				} else {
					d = r.m[i]
				}
			}
			r.p[i] -= lr * d
		}
	}
}

func adamRef(b1, b2, eps, wd float64, decoupled bool) func(*ref, []float64, float64) {
	return func(r *ref, g []float64, lr float64) {
		r.step++
		t := float64(r.step)
		for i := range r.p {
			gi := g[i]
			if decoupled {
				r.p[i] *= 1 - lr*wd
			} else {
				gi += wd * r.p[i]
			}
			r.m[i] = b1*r.m[i] + (1-b1)*gi
			r.v[i] = b2*r.v[i] + (1-b2)*gi*gi
			mhat := r.m[i] / (1 - math.Pow(b1, t))
			vhat := r.v[i] / (1 - math.Pow(b2, t))
			r.p[i] -= lr * mhat / (math.Sqrt(vhat) + eps)
		}
	}
}

func adadeltaRef(rho, eps, wd float64) func(*ref, []float64, float64) {
	return func(r *ref, g []float64, lr float64) {
		for i := range r.p {
			gi := g[i] + wd*r.p[i]
			r.m[i] = rho*r.m[i] + (1-rho)*gi*gi
			delta := math.Sqrt(r.v[i]+eps) / math.Sqrt(r.m[i]+eps) * gi
			r.v[i] = rho*r.v[i] + (1-rho)*delta*delta
			r.p[i] -= lr * delta
		}
	}
}

func randFloats(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

func TestOptimizersMatchFloat64Reference(t *testing.T) {
	const steps = 10
	sizes := []int{1, 7, 33}
	for _, c := range refCases() {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			params := make([]*tensor.Tensor, len(sizes))
			refs := make([]*ref, len(sizes))
			for i, n := range sizes {
				params[i] = tensor.New(randFloats(rng, n), n).SetRequiresGrad(true)
				refs[i] = &ref{p: make([]float64, n), m: make([]float64, n), v: make([]float64, n)}
				for j, v := range params[i].Data() {
					refs[i].p[j] = float64(v)
				}
			}
			opt := c.newGo(params)
			for s := 0; s < steps; s++ {
				for i, p := range params {
					g := randFloats(rng, p.Len())
					p.SetGrad(tensor.New(g, p.Len()))
					g64 := make([]float64, len(g))
					for j, v := range g {
						g64[j] = float64(v)
					}
					c.step(refs[i], g64, c.lr)
				}
				opt.Step()
			}
			for i, p := range params {
				for j, got := range p.Data() {
					if want := refs[i].p[j]; !closeRel(float64(got), want, 1e-5) {
						t.Errorf("param %d [%d]: got %.9g, float64 reference %.9g", i, j, got, want)
					}
				}
			}
		})
	}
}

// runSteps runs steps optimizer (and scheduler) steps with gradients drawn
// from rng.
func runSteps(params []*tensor.Tensor, opt Optimizer, sched Scheduler, rng *rand.Rand, steps int) {
	for s := 0; s < steps; s++ {
		opt.ZeroGrad()
		for _, p := range params {
			if p.Grad() == nil {
				p.SetGrad(tensor.Zeros(p.Shape()...))
			}
			copy(p.Grad().Data(), randFloats(rng, p.Len()))
		}
		opt.Step()
		if sched != nil {
			sched.Step()
		}
	}
}

func cloneParams(ps []*tensor.Tensor) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		out[i] = p.Clone().SetRequiresGrad(true)
	}
	return out
}

// TestStateDictResume stops after k steps, saves, loads into a fresh
// optimizer and scheduler, and checks the continued trajectory is
// bit-for-bit the uninterrupted one.
func TestStateDictResume(t *testing.T) {
	const k, more = 4, 6
	for _, c := range refCases() {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			init := []*tensor.Tensor{tensor.New(randFloats(rng, 12), 3, 4), tensor.New(randFloats(rng, 5), 5)}

			straight := cloneParams(init)
			opt := c.newGo(straight)
			sched := NewStepLR(opt, 3, 0.5)
			runSteps(straight, opt, sched, rand.New(rand.NewPCG(5, 6)), k+more)

			first := cloneParams(init)
			opt1 := c.newGo(first)
			sched1 := NewStepLR(opt1, 3, 0.5)
			gradRNG := rand.New(rand.NewPCG(5, 6))
			runSteps(first, opt1, sched1, gradRNG, k)
			optState, schedState := opt1.StateDict(), sched1.StateDict()
			weights := cloneParams(first) // what the model checkpoint would hold
			// Mutating the live optimizer must not change a saved state.
			runSteps(first, opt1, nil, rand.New(rand.NewPCG(9, 9)), 1)

			resumed := cloneParams(weights)
			opt2 := c.newGo(resumed)
			sched2 := NewStepLR(opt2, 100, 0.9) // settings come from the state
			if err := opt2.LoadStateDict(optState); err != nil {
				t.Fatal(err)
			}
			if err := sched2.LoadStateDict(schedState); err != nil {
				t.Fatal(err)
			}
			runSteps(resumed, opt2, sched2, gradRNG, more)
			for i := range straight {
				if !slices.Equal(straight[i].Data(), resumed[i].Data()) {
					t.Fatalf("param %d: resumed trajectory differs:\n%v\n%v", i, straight[i].Data(), resumed[i].Data())
				}
			}
			if opt.LR() != opt2.LR() {
				t.Fatalf("lr after resume %v, uninterrupted %v", opt2.LR(), opt.LR())
			}
		})
	}
}

func TestStateDictNames(t *testing.T) {
	p := tensor.Zeros(2, 3).SetRequiresGrad(true)
	q := tensor.Zeros(4).SetRequiresGrad(true)
	opt := NewAdam([]*tensor.Tensor{p, q}, 0.1)
	p.SetGrad(tensor.Full(1, 2, 3)) // q has no gradient: no state for it
	opt.Step()
	st := opt.StateDict()
	var names []string
	for k := range st.Tensors {
		names = append(names, k)
	}
	slices.Sort(names)
	if want := []string{"state.0.exp_avg", "state.0.exp_avg_sq"}; !slices.Equal(names, want) {
		t.Fatalf("tensors %v, want %v", names, want)
	}
	if st.Meta["state.0.step"] != "1" || st.Meta["optimizer"] != "Adam" || st.Meta["lr"] != "0.1" || st.Meta["beta2"] != "0.999" {
		t.Fatalf("meta %v", st.Meta)
	}
	if _, ok := st.Meta["state.1.step"]; ok {
		t.Fatal("parameter without gradient has a step")
	}
	if !slices.Equal(st.Tensors["state.0.exp_avg"].Shape(), []int{2, 3}) {
		t.Fatalf("exp_avg shape %v", st.Tensors["state.0.exp_avg"].Shape())
	}
}

func TestLoadStateDictErrors(t *testing.T) {
	mk := func() (*tensor.Tensor, *SGD) {
		p := tensor.Zeros(3).SetRequiresGrad(true)
		o := NewSGD([]*tensor.Tensor{p}, 0.1, Momentum(0.9))
		p.SetGrad(tensor.Full(1, 3))
		o.Step()
		return p, o
	}
	_, src := mk()
	good := src.StateDict()
	edit := func(f func(st *State)) State {
		st := State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{}}
		for k, v := range good.Tensors {
			st.Tensors[k] = v
		}
		for k, v := range good.Meta {
			st.Meta[k] = v
		}
		f(&st)
		return st
	}
	cases := []struct {
		name, want string
		st         State
	}{
		{"wrong optimizer", `state is for optimizer "Adam"`, edit(func(st *State) { st.Meta["optimizer"] = "Adam" })},
		{"param count", "state has 2 parameters", edit(func(st *State) { st.Meta["params"] = "2" })},
		{"bad lr", `lr = "x" is not a number`, edit(func(st *State) { st.Meta["lr"] = "x" })},
		{"missing hyper", "missing momentum", edit(func(st *State) { delete(st.Meta, "momentum") })},
		{"bad bool", "nesterov", edit(func(st *State) { st.Meta["nesterov"] = "maybe" })},
		{"bad step", "state.0.step", edit(func(st *State) { st.Meta["state.0.step"] = "-1" })},
		{"missing tensor", "missing tensor state.0.momentum_buffer", edit(func(st *State) { delete(st.Tensors, "state.0.momentum_buffer") })},
		{"shape", "has shape [4]", edit(func(st *State) { st.Tensors["state.0.momentum_buffer"] = tensor.Zeros(4) })},
		{"unexpected", "unexpected tensors state.7.exp_avg", edit(func(st *State) { st.Tensors["state.7.exp_avg"] = tensor.Zeros(1) })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, o := mk()
			before := slices.Clone(o.state[0][0])
			err := o.LoadStateDict(c.st)
			if !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrStateDict containing %q", err, c.want)
			}
			if !slices.Equal(o.state[0][0], before) || o.LR() != 0.1 {
				t.Fatal("failed load changed the optimizer")
			}
			_ = p
		})
	}
	// Momentum on in the state but off here (even before any step) would
	// leave Step without its buffer.
	noMomentum := NewSGD([]*tensor.Tensor{tensor.Zeros(3)}, 0.1)
	if err := noMomentum.LoadStateDict(NewSGD([]*tensor.Tensor{tensor.Zeros(3)}, 0.1, Momentum(0.5)).StateDict()); !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), "momentum is 0.5 in the state but 0 here") {
		t.Fatalf("momentum mismatch: err = %v", err)
	}
	if err := NewStepLR(src, 2, 0.5).LoadStateDict(NewCosineAnnealingLR(src, 3, 0).StateDict()); !errors.Is(err, ErrStateDict) {
		t.Fatalf("scheduler kind mismatch: err = %v", err)
	}
}

func TestZeroGradKeepsStorage(t *testing.T) {
	p := tensor.Zeros(4).SetRequiresGrad(true)
	bucket := []float32{9, 9, 1, 2, 3, 4, 9}
	g := tensor.New(bucket[2:6], 4) // a view into a larger buffer, as DDP makes
	p.SetGrad(g)
	q := tensor.Zeros(2).SetRequiresGrad(true) // no gradient at all
	opt := NewSGD([]*tensor.Tensor{p, q}, 0.5)
	opt.Step()
	if want := []float32{-0.5, -1, -1.5, -2}; !slices.Equal(p.Data(), want) {
		t.Fatalf("after step %v, want %v", p.Data(), want)
	}
	if !slices.Equal(q.Data(), []float32{0, 0}) {
		t.Fatal("parameter without gradient changed")
	}
	opt.ZeroGrad()
	if p.Grad() != g || !slices.Equal(bucket, []float32{9, 9, 0, 0, 0, 0, 9}) {
		t.Fatalf("ZeroGrad did not zero in place: %v", bucket)
	}
}

func TestGradientNotModified(t *testing.T) {
	for _, c := range refCases() {
		p := tensor.Full(1, 3).SetRequiresGrad(true)
		p.SetGrad(tensor.New([]float32{1, -2, 3}, 3))
		opt := c.newGo([]*tensor.Tensor{p})
		opt.Step()
		opt.Step()
		if !slices.Equal(p.Grad().Data(), []float32{1, -2, 3}) {
			t.Errorf("%s: Step changed the gradient to %v", c.name, p.Grad().Data())
		}
	}
}

func expectPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one containing %q", want)
		}
		if msg, _ := r.(string); !strings.HasPrefix(msg, "optim: ") || !strings.Contains(msg, want) {
			t.Fatalf("panic %v, want one containing %q", r, want)
		}
	}()
	f()
}

func TestConstructorPanics(t *testing.T) {
	ps := []*tensor.Tensor{tensor.Zeros(1)}
	expectPanic(t, "Nesterov", func() { NewSGD(ps, 0.1, Nesterov(true)) })
	expectPanic(t, "Nesterov", func() { NewSGD(ps, 0.1, Momentum(0.9), Dampening(0.1), Nesterov(true)) })
	expectPanic(t, "does not take option Rho", func() { NewSGD(ps, 0.1, Rho(0.5)) })
	expectPanic(t, "does not take option Momentum", func() { NewAdam(ps, 0.1, Momentum(0.5)) })
	expectPanic(t, "invalid learning rate", func() { NewAdamW(ps, -1) })
	expectPanic(t, "invalid learning rate NaN", func() { NewSGD(ps, math.NaN()) })
	expectPanic(t, "invalid learning rate +Inf", func() { NewSGD(ps, 0.1).SetLR(math.Inf(1)) })
	expectPanic(t, "StepLR: invalid gamma -0.5", func() { NewStepLR(NewSGD(ps, 0.1), 1, -0.5) })
	expectPanic(t, "invalid beta2", func() { NewAdam(ps, 0.1, Betas(0.9, 1)) })
	expectPanic(t, "invalid rho", func() { NewAdadelta(ps, 1, Rho(1.5)) })
	expectPanic(t, "invalid momentum", func() { NewSGD(ps, 0.1, Momentum(-1)) })
	expectPanic(t, "parameter 1 is also parameter 0", func() { NewSGD([]*tensor.Tensor{ps[0], ps[0]}, 0.1) })
	expectPanic(t, "step size", func() { NewStepLR(NewSGD(ps, 0.1), 0, 0.1) })
	expectPanic(t, "T_max", func() { NewCosineAnnealingLR(NewSGD(ps, 0.1), 0, 0) })
	expectPanic(t, "eta_min", func() { NewCosineAnnealingLR(NewSGD(ps, 0.1), 5, -1) })
	expectPanic(t, "invalid eta_min NaN", func() { NewCosineAnnealingLR(NewSGD(ps, 0.1), 5, math.NaN()) })
}

func TestSchedulerLoadStateDictErrors(t *testing.T) {
	opt := NewSGD([]*tensor.Tensor{tensor.Zeros(1)}, 0.1)
	src := NewStepLR(opt, 3, 0.5)
	src.Step()
	good := src.StateDict().Meta
	for _, c := range []struct{ key, value, want string }{
		{"last_epoch", "", "missing last_epoch"},
		{"last_epoch", "1.5", "not an integer"},
		{"base_lr", "nan?", "not a number"},
		{"step_size", "0", "step_size 0 < 1"},
		{"gamma", "", "missing gamma"},
	} {
		meta := maps.Clone(good)
		if c.value == "" {
			delete(meta, c.key)
		} else {
			meta[c.key] = c.value
		}
		dst := NewStepLR(opt, 7, 0.9)
		err := dst.LoadStateDict(State{Meta: meta})
		if !errors.Is(err, ErrStateDict) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%q: err = %v, want one containing %q", c.key, c.value, err, c.want)
		}
		if dst.stepSize != 7 || dst.gamma != 0.9 || dst.lastEpoch != 0 {
			t.Errorf("%s=%q: failed load changed the scheduler", c.key, c.value)
		}
	}
	cos := NewCosineAnnealingLR(opt, 4, 0)
	meta := cos.StateDict().Meta
	meta["eta_min"] = "-1"
	if err := NewCosineAnnealingLR(opt, 4, 0).LoadStateDict(State{Meta: meta}); err == nil || !strings.Contains(err.Error(), "eta_min") {
		t.Errorf("negative eta_min: err = %v", err)
	}
}
