package tensor

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
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
	return batchNormAct("BatchNorm", x, weight, bias, runningMean, runningVar, nil, false, training, momentum, eps)
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
	cb := bn.channelBlock(1)
	blocks, minBlocks := bn.blocks(cb)
	parallelFor(blocks, minBlocks, func(_, lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			bn.channelStats(x, blk*cb, min((blk+1)*cb, bn.c), runningMean, runningVar, training, momentum, eps, mean, invStd)
		}
	})
	return mean, invStd
}

// bnChannelBlock is how many channels of bn the passes over the input
// take together, image by image (see backwardChannelsAct), for a pass
// that reads or writes streams arrays: as many as keep each channel's
// n·s values of every stream within half of L2, at least 1, so that the
// second pass over a block finds it in cache. A variable for the tests.
var bnChannelBlock = func(bn batchNormGeom, streams int) int {
	return max(1, min(bn.c, kernels.L2CacheBytes()/2/max(4*streams*bn.m(), 1)))
}

// channelBlock is bnChannelBlock(bn, streams).
func (bn batchNormGeom) channelBlock(streams int) int { return bnChannelBlock(bn, streams) }

// blocks returns the number of blocks of cb channels and the fewest of
// them per goroutine (about minChannels' worth).
func (bn batchNormGeom) blocks(cb int) (blocks, minBlocks int) {
	return (bn.c + cb - 1) / cb, max(1, bn.minChannels()/cb)
}

// channelStats is batchStats for channels lo..hi−1, image by image (see
// backwardChannelsAct); each channel's sums run over the images in order.
func (bn batchNormGeom) channelStats(x []float32, lo, hi int, runningMean, runningVar *Tensor, training bool, momentum, eps float32, mean, invStd []float32) {
	m := bn.m()
	nc := hi - lo
	// One pass over each channel: with k one of its values, near the
	// mean whatever the mean's size, Σ(x − k)² − (Σ(x − k))²/m gives the
	// squared deviations with little cancellation in float64.
	sums := make([]float64, 3*nc)
	ks, s1s, s2s := sums[:nc], sums[nc:2*nc], sums[2*nc:]
	if m > 0 {
		for ch := lo; ch < hi; ch++ {
			ks[ch-lo] = float64(bn.row(x, 0, ch)[0])
		}
	}
	for i := 0; i < bn.n; i++ {
		for ch := lo; ch < hi; ch++ {
			a, b := kernels.BNShiftSums64(bn.row(x, i, ch), ks[ch-lo])
			s1s[ch-lo], s2s[ch-lo] = s1s[ch-lo]+a, s2s[ch-lo]+b
		}
	}
	for ch := lo; ch < hi; ch++ {
		k, s1, s2 := ks[ch-lo], s1s[ch-lo], s2s[ch-lo]
		mu := k + s1/float64(m)
		sq := max(s2-s1*s1/float64(m), 0)
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

// The channel sums run in float64 (kernels.BNSum64 and its kin: 16
// partial sums, vectorised where the machine allows) in an order that
// depends on the row's length alone, so that every thread count gives
// the same bits. The order differs from a single chain's by float64
// rounding only, far below the float32 results'.

// sum64 is Σv in float64.
func sum64(v []float32) float64 { return kernels.BNSum64(v) }

// sqDev64 is Σ(v − mu)² in float64.
func sqDev64(v []float32, mu float64) float64 { return kernels.BNSqDev64(v, mu) }

// sumDot64 is Σg and Σg·h in float64 (h at least as long as g).
func sumDot64(g, h []float32) (sum, dot float64) { return kernels.BNSumDot64(g, h) }
