package optim

import (
	"fmt"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/tensor"
)

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and weight decay, exactly as torch.optim.SGD:
//
//	g = ∇ + weight_decay·p
//	buf = g on the first step, then buf = momentum·buf + (1−dampening)·g
//	g = g + momentum·buf (Nesterov) or g = buf
//	p = p − lr·g
type SGD struct {
	core
	momentum, dampening float64
	nesterov, maximize  bool
}

// NewSGD returns SGD over params with learning rate lr. It accepts the
// options Momentum, Dampening, Nesterov, WeightDecay and Maximize, and
// panics, like PyTorch, on Nesterov without momentum or with dampening.
func NewSGD(params []*tensor.Tensor, lr float64, opts ...Option) *SGD {
	c := config{}.apply("SGD", opts, "Momentum", "Dampening", "Nesterov", "WeightDecay", "Maximize")
	if c.nesterov && (c.momentum <= 0 || c.dampening != 0) {
		panic(fmt.Sprintf("optim: SGD: Nesterov momentum requires a momentum > 0 and zero dampening (momentum %v, dampening %v)", c.momentum, c.dampening))
	}
	var slots []string
	if c.momentum != 0 {
		slots = []string{"momentum_buffer"}
	}
	o := &SGD{
		core:     newCore("SGD", params, lr, c.weightDecay, slots),
		momentum: c.momentum, dampening: c.dampening,
		nesterov: c.nesterov, maximize: c.maximize,
	}
	o.hypers = []hyper{
		{name: "momentum", f: &o.momentum},
		{name: "dampening", f: &o.dampening},
		{name: "nesterov", b: &o.nesterov},
		{name: "maximize", b: &o.maximize},
	}
	o.structural = "momentum"
	o.update = o.updateParam
	return o
}

func (o *SGD) updateParam(p, grad, scratch []float32, slots [][]float32, step int64, grp *group) {
	d := grad
	if grp.weightDecay != 0 || o.maximize || o.nesterov {
		// The gradient itself must stay untouched, as in PyTorch.
		d = scratch
		copy(d, grad)
		if o.maximize {
			kernels.Scale(-1, d)
		}
		if grp.weightDecay != 0 {
			kernels.Axpy(float32(grp.weightDecay), p, d)
		}
	}
	if o.momentum != 0 && !o.nesterov && step > 1 {
		// The common case, blocked so that the three passes over each
		// block run in L1: the parameters, gradient and momentum stream
		// from memory once instead of three times (same operations, same
		// order per element, so the same bits).
		buf := slots[0]
		m, damp, lr := float32(o.momentum), float32(1-o.dampening), float32(-grp.lr)
		for lo := 0; lo < len(p); lo += sgdBlock {
			hi := min(lo+sgdBlock, len(p))
			kernels.Scale(m, buf[lo:hi])
			kernels.Axpy(damp, d[lo:hi], buf[lo:hi])
			kernels.Axpy(lr, buf[lo:hi], p[lo:hi])
		}
		return
	}
	if o.momentum != 0 {
		buf := slots[0]
		if step == 1 {
			copy(buf, d)
		} else {
			kernels.Scale(float32(o.momentum), buf)
			kernels.Axpy(float32(1-o.dampening), d, buf)
		}
		if o.nesterov {
			kernels.Axpy(float32(o.momentum), buf, d)
		} else {
			d = buf
		}
	}
	kernels.Axpy(float32(-grp.lr), d, p)
}

// sgdBlock is how many elements the momentum update takes at a time: three
// 8 KiB slices fit in L1 together.
const sgdBlock = 2048
