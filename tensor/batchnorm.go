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
	bn := newBatchNormGeom(x, weight, bias, runningMean, runningVar)
	useBatch := training || runningMean == nil || runningVar == nil
	if useBatch && bn.m() <= 1 && training {
		panic(fmt.Sprintf("tensor: BatchNorm: training needs more than one value per channel, got input %v", x.shape))
	}
	var mean, invStd []float32
	if useBatch {
		mean, invStd = bn.batchStats(x.data, runningMean, runningVar, training, momentum, eps)
	} else {
		mean, invStd = runningStats(runningMean, runningVar, eps)
	}
	// normalize writes every element of out and xhat: pooled buffers need
	// no clearing.
	out := &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	// xhat is kept for the backward pass of batch statistics and weight,
	// which hands it back to the pool.
	var xhat []float32
	if GradEnabled() && (x.requiresGrad || weight.needsGrad()) {
		xhat = getBuf(len(x.data))
	}
	bn.normalize(x.data, out.data, xhat, weight, bias, mean, invStd)
	inputs := []*Tensor{x, weight, bias}
	return record(out, "batch_norm", func(g []float32) {
		// The channels run concurrently: claim the gradient buffers first.
		for _, t := range inputs {
			if t.needsGrad() {
				t.accGrad()
			}
		}
		parallelFor(bn.c, bn.minChannels(), func(_, lo, hi int) {
			for ch := lo; ch < hi; ch++ {
				bn.backwardChannel(ch, g, xhat, x, weight, bias, invStd[ch], useBatch)
			}
		})
		putBuf(xhat)
		xhat = nil
	}, inputs...)
}

// batchNormGeom is the layout of BatchNorm's input: n samples of c
// channels of s values each (s = H·W for images, 1 for [N, C]).
type batchNormGeom struct{ n, c, s int }

// newBatchNormGeom checks BatchNorm's operands (mistakes panic) and
// returns the input's layout.
func newBatchNormGeom(x, weight, bias, runningMean, runningVar *Tensor) batchNormGeom {
	if x.Dim() < 2 {
		panic(fmt.Sprintf("tensor: BatchNorm: input %v is not [N, C, ...]", x.shape))
	}
	bn := batchNormGeom{n: x.shape[0], c: x.shape[1], s: numel(x.shape[2:])}
	for _, p := range []struct {
		name string
		t    *Tensor
	}{{"weight", weight}, {"bias", bias}, {"running mean", runningMean}, {"running var", runningVar}} {
		if p.t != nil && (p.t.Dim() != 1 || p.t.shape[0] != bn.c) {
			panic(fmt.Sprintf("tensor: BatchNorm: %s %v does not match input %v (C = %d)", p.name, p.t.shape, x.shape, bn.c))
		}
	}
	return bn
}

// m is the number of values per channel.
func (bn batchNormGeom) m() int { return bn.n * bn.s }

// minChannels is the number of channels per goroutine below which a pass
// over the input stays on one goroutine (poolMinItems values).
func (bn batchNormGeom) minChannels() int { return poolMinItems/max(bn.m(), 1) + 1 }

// row returns the s values of channel ch of sample i in data.
func (bn batchNormGeom) row(data []float32, i, ch int) []float32 {
	off := (i*bn.c + ch) * bn.s
	return data[off : off+bn.s]
}

// batchStats returns each channel's batch mean and 1/sqrt(biased variance
// + eps), computed in float64, and in training updates the running stats
// given (without grad): running = (1−momentum)·running + momentum·batch,
// with the unbiased variance for runningVar.
func (bn batchNormGeom) batchStats(x []float32, runningMean, runningVar *Tensor, training bool, momentum, eps float32) (mean, invStd []float32) {
	mean = make([]float32, bn.c)
	invStd = make([]float32, bn.c)
	parallelFor(bn.c, bn.minChannels(), func(_, lo, hi int) {
		bn.channelStats(x, lo, hi, runningMean, runningVar, training, momentum, eps, mean, invStd)
	})
	return mean, invStd
}

// channelStats is batchStats for channels lo..hi−1.
func (bn batchNormGeom) channelStats(x []float32, lo, hi int, runningMean, runningVar *Tensor, training bool, momentum, eps float32, mean, invStd []float32) {
	m := bn.m()
	for ch := lo; ch < hi; ch++ {
		var sum float64
		for i := 0; i < bn.n; i++ {
			sum += sum64(bn.row(x, i, ch))
		}
		mu := sum / float64(m)
		var sq float64
		for i := 0; i < bn.n; i++ {
			sq += sqDev64(bn.row(x, i, ch), mu)
		}
		v := sq / float64(m)
		if training && runningMean != nil {
			mom := float64(momentum)
			runningMean.data[ch] = float32((1-mom)*float64(runningMean.data[ch]) + mom*mu)
		}
		if training && runningVar != nil {
			mom := float64(momentum)
			unbiased := sq / float64(max(m-1, 1))
			runningVar.data[ch] = float32((1-mom)*float64(runningVar.data[ch]) + mom*unbiased)
		}
		mean[ch] = float32(mu)
		invStd[ch] = float32(1 / math.Sqrt(v+float64(eps)))
	}
}

// runningStats returns the running mean and 1/sqrt(running var + eps),
// the statistics of evaluation.
func runningStats(runningMean, runningVar *Tensor, eps float32) (mean, invStd []float32) {
	c := len(runningMean.data)
	mean = make([]float32, c)
	invStd = make([]float32, c)
	for ch := 0; ch < c; ch++ {
		mu, v := float64(runningMean.data[ch]), float64(runningVar.data[ch])
		mean[ch] = float32(mu)
		invStd[ch] = float32(1 / math.Sqrt(v+float64(eps)))
	}
	return mean, invStd
}

// normalize writes out = x̂·γ + β with x̂ = (x − mean)·invStd per channel
// (γ = 1, β = 0 without affine parameters), and x̂ into xhat unless nil.
func (bn batchNormGeom) normalize(x, out, xhat []float32, weight, bias *Tensor, mean, invStd []float32) {
	// Rows (sample i, channel ch) are independent.
	parallelFor(bn.n*bn.c, poolMinItems/max(bn.s, 1)+1, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			i, ch := r/bn.c, r%bn.c
			a, sh := float32(1), float32(0)
			if weight != nil {
				a = weight.data[ch]
			}
			if bias != nil {
				sh = bias.data[ch]
			}
			mu, is := mean[ch], invStd[ch]
			off := (i*bn.c + ch) * bn.s
			src, dst := x[off:off+bn.s], out[off:off+bn.s]
			if xhat == nil {
				for j, xv := range src {
					dst[j] = (xv-mu)*is*a + sh
				}
				continue
			}
			xh := xhat[off : off+bn.s]
			for j, xv := range src {
				h := (xv - mu) * is
				xh[j] = h
				dst[j] = h*a + sh
			}
		}
	})
}

// backwardChannel accumulates channel ch's gradients of x, weight and
// bias from the output gradient g. With batch statistics (useBatch) the
// mean and variance depend on x too.
func (bn batchNormGeom) backwardChannel(ch int, g, xhat []float32, x, weight, bias *Tensor, invStd float32, useBatch bool) {
	n, c, s, m := bn.n, bn.c, bn.s, bn.m()
	a := float32(1)
	if weight != nil {
		a = weight.data[ch]
	}
	// Σg and Σg·x̂ over the channel give the affine gradients and the
	// batch-statistics terms of dx.
	var sg, sgh float64
	for i := 0; i < n; i++ {
		off := (i*c + ch) * s
		if xhat == nil {
			sg += sum64(g[off : off+s])
			continue
		}
		a, b := sumDot64(g[off:off+s], xhat[off:off+s])
		sg, sgh = sg+a, sgh+b
	}
	if weight.needsGrad() {
		weight.accGrad()[ch] += float32(sgh)
	}
	if bias.needsGrad() {
		bias.accGrad()[ch] += float32(sg)
	}
	if !x.needsGrad() {
		return
	}
	gx := x.accGrad()
	k := a * invStd
	if !useBatch { // constant statistics: dx = g·γ/σ
		for i := 0; i < n; i++ {
			off := (i*c + ch) * s
			for j, gv := range g[off : off+s] {
				gx[off+j] += gv * k
			}
		}
		return
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

// The channel sums below run in float64 over four interleaved partial
// sums, added at the end: one chain would wait for each add's latency.
// The order differs from a single chain's by float64 rounding only, far
// below the float32 results'.

// sum64 is Σv in float64.
func sum64(v []float32) float64 {
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+4 <= len(v); j += 4 {
		s0 += float64(v[j])
		s1 += float64(v[j+1])
		s2 += float64(v[j+2])
		s3 += float64(v[j+3])
	}
	for ; j < len(v); j++ {
		s0 += float64(v[j])
	}
	return (s0 + s1) + (s2 + s3)
}

// sqDev64 is Σ(v − mu)² in float64.
func sqDev64(v []float32, mu float64) float64 {
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+4 <= len(v); j += 4 {
		d0, d1 := float64(v[j])-mu, float64(v[j+1])-mu
		d2, d3 := float64(v[j+2])-mu, float64(v[j+3])-mu
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; j < len(v); j++ {
		d := float64(v[j]) - mu
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// sumDot64 is Σg and Σg·h in float64 (h at least as long as g).
func sumDot64(g, h []float32) (sum, dot float64) {
	h = h[:len(g)]
	var s0, s1, d0, d1 float64
	j := 0
	for ; j+2 <= len(g); j += 2 {
		g0, g1 := float64(g[j]), float64(g[j+1])
		s0 += g0
		s1 += g1
		d0 += g0 * float64(h[j])
		d1 += g1 * float64(h[j+1])
	}
	for ; j < len(g); j++ {
		s0 += float64(g[j])
		d0 += float64(g[j]) * float64(h[j])
	}
	return s0 + s1, d0 + d1
}
