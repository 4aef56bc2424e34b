package tensor

import (
	"fmt"
	"math"
)

// SumReducer replaces buf by its element-wise sum over every replica of a
// data-parallel job, the same values on all of them. Every replica calls
// it with buffers of the same length, in the same order.
type SumReducer func(buf []float64) error

// BatchNormSync is BatchNorm in training over a batch split across
// replicas, PyTorch's SyncBatchNorm: each replica passes its slice x
// (possibly of zero samples) and gets its slice of the output, normalised
// with the statistics of the whole batch.
//
// The forward pass calls reduce once with [Σx per channel, Σx² per
// channel, values per channel] (2C+1 values), from which the global mean,
// the biased variance for normalising and the unbiased one for runningVar
// follow; running stats, if given, are updated as BatchNorm does. The
// backward pass, when x needs a gradient, calls reduce once with [Σg, Σg·x̂]
// per channel (2C values) and computes x's gradient with the global
// count. The gradients of weight and bias are those of this replica's
// slice; data-parallel training averages them.
//
// If reduce returns an error, that call goes on with this replica's own
// statistics (and leaves the running stats alone), so the step completes;
// the reducer keeps the error and reports it. A batch of fewer than two
// values per channel over all replicas panics, as BatchNorm's does.
func BatchNormSync(x, weight, bias, runningMean, runningVar *Tensor, momentum, eps float32, reduce SumReducer) *Tensor {
	bn := newBatchNormGeom(x, weight, bias, runningMean, runningVar)
	c := bn.c
	stats := make([]float64, 2*c+1)
	bn.moments(x.data, stats[:c], stats[c:2*c])
	stats[2*c] = float64(bn.m())
	local := append([]float64(nil), stats...)
	synced := reduce(stats) == nil
	if !synced {
		stats = local
	}
	count := stats[2*c]
	if synced && count <= 1 {
		panic(fmt.Sprintf("tensor: BatchNormSync: training needs more than one value per channel over all replicas, got %g (input here %v)", count, x.shape))
	}
	mean := make([]float32, c)
	invStd := make([]float32, c)
	for ch := 0; ch < c && count > 0; ch++ {
		mu := stats[ch] / count
		v := max(stats[c+ch]/count-mu*mu, 0) // rounding can make E[x²]−mean² negative
		if synced {
			mom := float64(momentum)
			if runningMean != nil {
				runningMean.data[ch] = float32((1-mom)*float64(runningMean.data[ch]) + mom*mu)
			}
			if runningVar != nil {
				unbiased := v * count / (count - 1)
				runningVar.data[ch] = float32((1-mom)*float64(runningVar.data[ch]) + mom*unbiased)
			}
		}
		mean[ch] = float32(mu)
		invStd[ch] = float32(1 / math.Sqrt(v+float64(eps)))
	}
	out := Zeros(x.shape...)
	var xhat []float32
	if GradEnabled() && (x.requiresGrad || weight.needsGrad()) {
		xhat = make([]float32, len(x.data))
	}
	bn.normalize(x.data, out.data, xhat, weight, bias, mean, invStd)
	return record(out, "sync_batch_norm", func(g []float32) {
		bn.backwardSync(g, xhat, x, weight, bias, invStd, count, reduce)
	}, x, weight, bias)
}

// moments writes each channel's Σx and Σx² into sum and sumSq, in float64.
func (bn batchNormGeom) moments(x []float32, sum, sumSq []float64) {
	for ch := 0; ch < bn.c; ch++ {
		var s, sq float64
		for i := 0; i < bn.n; i++ {
			r := bn.row(x, i, ch)
			s += sum64(r)
			sq += sqDev64(r, 0)
		}
		sum[ch], sumSq[ch] = s, sq
	}
}

// backwardSync accumulates BatchNormSync's gradients: weight and bias from
// this replica's Σg·x̂ and Σg, x's from those sums over all replicas:
// dx = γ/σ · (g − Σg/M − x̂·Σg·x̂/M) with M the global count.
func (bn batchNormGeom) backwardSync(g, xhat []float32, x, weight, bias *Tensor, invStd []float32, count float64, reduce SumReducer) {
	n, c, s := bn.n, bn.c, bn.s
	sums := make([]float64, 2*c)
	for ch := 0; ch < c; ch++ {
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
		sums[ch], sums[c+ch] = sg, sgh
	}
	if weight.needsGrad() {
		wg := weight.accGrad()
		for ch := 0; ch < c; ch++ {
			wg[ch] += float32(sums[c+ch])
		}
	}
	if bias.needsGrad() {
		bg := bias.accGrad()
		for ch := 0; ch < c; ch++ {
			bg[ch] += float32(sums[ch])
		}
	}
	if !x.needsGrad() {
		// Every replica's x is alike in this (the same model), so all
		// skip this reduction together, as PyTorch's does.
		return
	}
	local := append([]float64(nil), sums...)
	if reduce(sums) != nil {
		sums, count = local, float64(bn.m())
	}
	if count == 0 {
		return // no values here, and none anywhere to take statistics of
	}
	gx := x.accGrad()
	for ch := 0; ch < c; ch++ {
		a := float32(1)
		if weight != nil {
			a = weight.data[ch]
		}
		k := a * invStd[ch]
		mg, mgh := float32(sums[ch]/count), float32(sums[c+ch]/count)
		for i := 0; i < n; i++ {
			off := (i*c + ch) * s
			for j, gv := range g[off : off+s] {
				gx[off+j] += k * (gv - mg - xhat[off+j]*mgh)
			}
		}
	}
}
