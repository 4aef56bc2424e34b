package optim

import (
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/tensor"
)

// Adam is torch.optim.Adam: adaptive moment estimation with bias
// correction and L2 weight decay added to the gradient.
//
//	g = ∇ + weight_decay·p
//	m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//	p = p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + eps)
type Adam struct {
	core
	beta1, beta2, eps float64
	maximize          bool
}

// NewAdam returns Adam over params with learning rate lr (PyTorch's default
// is 1e-3). It accepts the options Betas (0.9, 0.999), Eps (1e-8),
// WeightDecay (0) and Maximize.
func NewAdam(params []*tensor.Tensor, lr float64, opts ...Option) *Adam {
	c := config{beta1: 0.9, beta2: 0.999, eps: 1e-8}.apply("Adam", opts, "Betas", "Eps", "WeightDecay", "Maximize")
	o := &Adam{core: newCore("Adam", params, lr, c.weightDecay, []string{"exp_avg", "exp_avg_sq"})}
	o.beta1, o.beta2, o.eps, o.maximize = c.beta1, c.beta2, c.eps, c.maximize
	o.hypers = adamHypers(&o.beta1, &o.beta2, &o.eps, &o.maximize)
	o.update = func(p, g, _ []float32, slots [][]float32, step int64, grp *group) {
		adamUpdate(p, g, slots[0], slots[1], step, grp.lr, o.beta1, o.beta2, o.eps, grp.weightDecay, 1, o.maximize)
	}
	return o
}

// AdamW is torch.optim.AdamW: Adam with decoupled weight decay, applied to
// the parameter (p = p·(1 − lr·weight_decay)) before the Adam step instead
// of being added to the gradient.
type AdamW struct {
	core
	beta1, beta2, eps float64
	maximize          bool
}

// NewAdamW returns AdamW over params with learning rate lr (PyTorch's
// default is 1e-3). It accepts the options Betas (0.9, 0.999), Eps (1e-8),
// WeightDecay (0.01) and Maximize.
func NewAdamW(params []*tensor.Tensor, lr float64, opts ...Option) *AdamW {
	c := config{beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01}.apply("AdamW", opts, "Betas", "Eps", "WeightDecay", "Maximize")
	o := &AdamW{core: newCore("AdamW", params, lr, c.weightDecay, []string{"exp_avg", "exp_avg_sq"})}
	o.beta1, o.beta2, o.eps, o.maximize = c.beta1, c.beta2, c.eps, c.maximize
	o.hypers = adamHypers(&o.beta1, &o.beta2, &o.eps, &o.maximize)
	o.update = func(p, g, _ []float32, slots [][]float32, step int64, grp *group) {
		adamUpdate(p, g, slots[0], slots[1], step, grp.lr, o.beta1, o.beta2, o.eps, 0, float32(1-grp.lr*grp.weightDecay), o.maximize)
	}
	return o
}

func adamHypers(beta1, beta2, eps *float64, maximize *bool) []hyper {
	return []hyper{
		{name: "beta1", f: beta1},
		{name: "beta2", f: beta2},
		{name: "eps", f: eps},
		{name: "maximize", b: maximize},
	}
}

// adamUpdate is one fused pass over a parameter: one read of p, g, m and v
// and one write of p, m and v per element, instead of the six passes of
// PyTorch's single-tensor path. wd is Adam's L2 weight decay; decay
// multiplies p first (AdamW's decoupled decay, 1 for Adam).
func adamUpdate(p, g, m, v []float32, step int64, lr, beta1, beta2, eps, wd float64, decay float32, maximize bool) {
	k := kernels.AdamConsts{
		Decay: decay, Sign: 1, WD: float32(wd),
		B1: float32(beta1), C1: float32(1 - beta1),
		B2: float32(beta2), C2: float32(1 - beta2),
		InvBC2:   float32(1 / math.Sqrt(1-math.Pow(beta2, float64(step)))),
		Eps:      float32(eps),
		StepSize: float32(lr / (1 - math.Pow(beta1, float64(step)))),
	}
	if maximize {
		k.Sign = -1
	}
	kernels.AdamUpdate(p, g, m, v, &k)
}
