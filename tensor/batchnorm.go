package tensor

import (
	"fmt"
	"math"
)

// BatchNorm normalises x per channel, PyTorch's batch_norm: x is [N, C] or
// [N, C, ...] (e.g. [N, C, H, W]); weight and bias are [C] or nil (no
// affine); runningMean and runningVar are [C] or nil (no running stats).
//
// In training it normalises with the batch mean and biased variance and, if
// running stats are given, updates them in place without grad:
// running = (1−momentum)·running + momentum·batch, using the unbiased
// variance for runningVar. In eval it normalises with the running stats.
func BatchNorm(x, weight, bias, runningMean, runningVar *Tensor, training bool, momentum, eps float32) *Tensor {
	if x.Dim() < 2 {
		panic(fmt.Sprintf("tensor: BatchNorm: input %v is not [N, C, ...]", x.shape))
	}
	n, c := x.shape[0], x.shape[1]
	s := numel(x.shape[2:])
	for _, p := range []struct {
		name string
		t    *Tensor
	}{{"weight", weight}, {"bias", bias}, {"running mean", runningMean}, {"running var", runningVar}} {
		if p.t != nil && (p.t.Dim() != 1 || p.t.shape[0] != c) {
			panic(fmt.Sprintf("tensor: BatchNorm: %s %v does not match input %v (C = %d)", p.name, p.t.shape, x.shape, c))
		}
	}
	useBatch := training || runningMean == nil || runningVar == nil
	m := n * s
	if useBatch && m <= 1 && training {
		panic(fmt.Sprintf("tensor: BatchNorm: training needs more than one value per channel, got input %v", x.shape))
	}
	mean := make([]float32, c)
	invStd := make([]float32, c)
	for ch := 0; ch < c; ch++ {
		var mu, v float64
		if useBatch {
			var sum float64
			for i := 0; i < n; i++ {
				for _, xv := range x.data[(i*c+ch)*s : (i*c+ch+1)*s] {
					sum += float64(xv)
				}
			}
			mu = sum / float64(m)
			var sq float64
			for i := 0; i < n; i++ {
				for _, xv := range x.data[(i*c+ch)*s : (i*c+ch+1)*s] {
					d := float64(xv) - mu
					sq += d * d
				}
			}
			v = sq / float64(m)
			if training && runningMean != nil {
				mom := float64(momentum)
				runningMean.data[ch] = float32((1-mom)*float64(runningMean.data[ch]) + mom*mu)
			}
			if training && runningVar != nil {
				mom := float64(momentum)
				unbiased := sq / float64(max(m-1, 1))
				runningVar.data[ch] = float32((1-mom)*float64(runningVar.data[ch]) + mom*unbiased)
			}
		} else {
			mu, v = float64(runningMean.data[ch]), float64(runningVar.data[ch])
		}
		mean[ch] = float32(mu)
		invStd[ch] = float32(1 / math.Sqrt(v+float64(eps)))
	}
	out := Zeros(x.shape...)
	// xhat is kept for the backward pass of batch statistics and weight.
	var xhat []float32
	if GradEnabled() && (x.requiresGrad || weight.needsGrad()) {
		xhat = make([]float32, len(x.data))
	}
	for i := 0; i < n; i++ {
		for ch := 0; ch < c; ch++ {
			a, sh := float32(1), float32(0)
			if weight != nil {
				a = weight.data[ch]
			}
			if bias != nil {
				sh = bias.data[ch]
			}
			mu, is := mean[ch], invStd[ch]
			off := (i*c + ch) * s
			src, dst := x.data[off:off+s], out.data[off:off+s]
			for j, xv := range src {
				h := (xv - mu) * is
				if xhat != nil {
					xhat[off+j] = h
				}
				dst[j] = h*a + sh
			}
		}
	}
	inputs := []*Tensor{x, weight, bias}
	return record(out, "batch_norm", func(g []float32) {
		for ch := 0; ch < c; ch++ {
			a := float32(1)
			if weight != nil {
				a = weight.data[ch]
			}
			// Σg and Σg·x̂ over the channel give the affine gradients and
			// the batch-statistics terms of dx.
			var sg, sgh float64
			for i := 0; i < n; i++ {
				off := (i*c + ch) * s
				for j, gv := range g[off : off+s] {
					sg += float64(gv)
					if xhat != nil {
						sgh += float64(gv) * float64(xhat[off+j])
					}
				}
			}
			if weight.needsGrad() {
				weight.accGrad()[ch] += float32(sgh)
			}
			if bias.needsGrad() {
				bias.accGrad()[ch] += float32(sg)
			}
			if !x.needsGrad() {
				continue
			}
			gx := x.accGrad()
			k := a * invStd[ch]
			if !useBatch { // constant statistics: dx = g·γ/σ
				for i := 0; i < n; i++ {
					off := (i*c + ch) * s
					for j, gv := range g[off : off+s] {
						gx[off+j] += gv * k
					}
				}
				continue
			}
			// dx = γ/σ · (g − mean(g) − x̂·mean(g·x̂))
			mg, mgh := float32(sg/float64(m)), float32(sgh/float64(m))
			for i := 0; i < n; i++ {
				off := (i*c + ch) * s
				for j, gv := range g[off : off+s] {
					gx[off+j] += k * (gv - mg - xhat[off+j]*mgh)
				}
			}
		}
	}, inputs...)
}
