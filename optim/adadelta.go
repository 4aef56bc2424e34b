package optim

import (
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/tensor"
)

// Adadelta is torch.optim.Adadelta:
//
//	g = ∇ + weight_decay·p
//	sq = ρ·sq + (1−ρ)·g²
//	δ = √(acc + eps) / √(sq + eps) · g
//	acc = ρ·acc + (1−ρ)·δ²
//	p = p − lr·δ
type Adadelta struct {
	core
	rho, eps float64
	maximize bool
}

// NewAdadelta returns Adadelta over params with learning rate lr (PyTorch's
// default is 1.0). It accepts the options Rho (0.9), Eps (1e-6),
// WeightDecay (0) and Maximize.
func NewAdadelta(params []*tensor.Tensor, lr float64, opts ...Option) *Adadelta {
	c := config{rho: 0.9, eps: 1e-6}.apply("Adadelta", opts, "Rho", "Eps", "WeightDecay", "Maximize")
	o := &Adadelta{core: newCore("Adadelta", params, lr, c.weightDecay, []string{"square_avg", "acc_delta"})}
	o.rho, o.eps, o.maximize = c.rho, c.eps, c.maximize
	o.hypers = []hyper{
		{name: "rho", f: &o.rho},
		{name: "eps", f: &o.eps},
		{name: "maximize", b: &o.maximize},
	}
	o.update = o.updateParam
	return o
}

// updateParam is one fused pass per element over p, g and both averages.
func (o *Adadelta) updateParam(p, g, _ []float32, slots [][]float32, _ int64, grp *group) {
	k := kernels.AdadeltaConsts{
		Sign: 1, WD: float32(grp.weightDecay),
		Rho: float32(o.rho), C: float32(1 - o.rho),
		Eps: float32(o.eps), LR: float32(grp.lr),
	}
	if o.maximize {
		k.Sign = -1
	}
	kernels.AdadeltaUpdate(p, g, slots[0], slots[1], &k)
}
