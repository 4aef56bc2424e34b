package tensor

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/internal/kernels"
)

// BatchNormReLU returns relu(BatchNorm(x, weight, bias, runningMean,
// runningVar, training, momentum, eps) + residual) as one op: the end of
// a residual block (residual nil: relu(BatchNorm(...)), a convolution's
// BatchNorm and ReLU). residual, if given, has x's shape. The results and
// gradients are those of the separate BatchNorm, Add and ReLU, bit for
// bit, from fewer passes over the activations: the forward pass writes
// the output alone, and the backward pass reads the output as ReLU's mask
// and recomputes x̂ from x instead of keeping it.
func BatchNormReLU(x, weight, bias, runningMean, runningVar, residual *Tensor, training bool, momentum, eps float32) *Tensor {
	if residual != nil && !slices.Equal(residual.shape, x.shape) {
		panic(fmt.Sprintf("tensor: BatchNormReLU: residual %v does not match input %v", residual.shape, x.shape))
	}
	return batchNormAct("BatchNormReLU", x, weight, bias, runningMean, runningVar, residual, true, training, momentum, eps)
}

// batchNormAct is BatchNorm followed by + residual (unless nil) and ReLU
// (if relu), recorded as the one op named op.
func batchNormAct(op string, x, weight, bias, runningMean, runningVar, residual *Tensor, relu, training bool, momentum, eps float32) *Tensor {
	bn := newBatchNormGeom(x, weight, bias, runningMean, runningVar)
	useBatch := training || runningMean == nil || runningVar == nil
	if useBatch && bn.m() <= 1 && training {
		panic(fmt.Sprintf("tensor: %s: training needs more than one value per channel, got input %v", op, x.shape))
	}
	var mean, invStd []float32
	if useBatch {
		mean, invStd = bn.batchStats(x.data, runningMean, runningVar, training, momentum, eps)
	} else {
		mean, invStd = runningStats(runningMean, runningVar, eps)
	}
	// The forward pass writes every element of out: a pooled buffer needs
	// no clearing.
	out := &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	var res []float32
	if residual != nil {
		res = residual.data
	}
	bn.forwardAct(x.data, res, out.data, relu, weight, bias, mean, invStd)
	inputs := []*Tensor{x, weight, bias}
	if residual != nil {
		inputs = append(inputs, residual)
	}
	name := "batch_norm"
	if relu {
		name = "batch_norm_relu"
	}
	return record(out, name, func(g []float32) {
		bn.backwardAct(g, out.data, x, weight, bias, residual, relu, useBatch, mean, invStd)
	}, inputs...)
}

// forwardAct writes out = act(x̂·γ + β + r) with x̂ = (x − mean)·invStd per
// channel (γ = 1, β = 0 without affine parameters; r = res, or none if
// nil; act = ReLU if relu, else the identity).
func (bn batchNormGeom) forwardAct(x, res, out []float32, relu bool, weight, bias *Tensor, mean, invStd []float32) {
	// Rows (sample i, channel ch) are independent.
	parallelFor(bn.n*bn.c, poolMinItems/max(bn.s, 1)+1, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			ch := r % bn.c
			a, sh := bn.affine(weight, bias, ch)
			off := r * bn.s
			kernels.BNNormRow(out[off:off+bn.s], x[off:off+bn.s], rowOf(res, off, bn.s), mean[ch], invStd[ch], a, sh, relu)
		}
	})
}

// affine returns channel ch's scale γ and shift β (1 and 0 without them).
func (bn batchNormGeom) affine(weight, bias *Tensor, ch int) (a, sh float32) {
	a = 1
	if weight != nil {
		a = weight.data[ch]
	}
	if bias != nil {
		sh = bias.data[ch]
	}
	return a, sh
}

// rowOf returns v[off:off+s], or nil if v is nil.
func rowOf(v []float32, off, s int) []float32 {
	if v == nil {
		return nil
	}
	return v[off : off+s]
}

// backwardAct accumulates the gradients of batchNormAct from the output
// gradient g and the output o: g' = g where o > 0 (with ReLU; g itself
// without) is the residual's gradient and the BatchNorm output's. With
// batch statistics (useBatch) the mean and variance depend on x too:
// dx = γ/σ · (g' − mean(g') − x̂·mean(g'·x̂)); with constant ones
// dx = g'·γ/σ.
func (bn batchNormGeom) backwardAct(g, o []float32, x, weight, bias, residual *Tensor, relu, useBatch bool, mean, invStd []float32) {
	// The channels run concurrently: claim the gradient buffers first.
	if weight.needsGrad() {
		weight.accGrad()
	}
	if bias.needsGrad() {
		bias.accGrad()
	}
	var gx, gr []float32
	freshX, freshR := false, false
	if x.needsGrad() {
		gx, freshX = x.gradDst()
	}
	if residual.needsGrad() {
		if residual == x {
			// Both contributions go to one buffer: add each.
			if freshX {
				clear(gx)
			}
			freshX = false
			gr = gx
		} else {
			gr, freshR = residual.gradDst()
		}
	}
	// Channels go to the threads in blocks (see channelBlock); per
	// worker, a row of g' where it is needed apart from the output.
	cb := bn.channelBlock(4)
	blocks, minBlocks := bn.blocks(cb)
	bufs := workerBufs(blocks, minBlocks, bn.s)
	parallelFor(blocks, minBlocks, func(w, lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			bn.backwardChannelsAct(blk*cb, min((blk+1)*cb, bn.c), g, o, x.data, gx, gr, freshX, freshR, bufs[w], weight, bias, relu, useBatch, mean, invStd)
		}
	})
	putBufs(bufs)
}

// backwardChannelsAct is backwardAct for channels c0…c1−1, image by
// image: each image's rows of those channels are contiguous, which the
// hardware prefetches, where one channel's rows alone, each of s values,
// lie c·s apart. Each channel's sums still run over the images in order,
// as one channel at a time would, so the results do not depend on the
// block. gm is a scratch row of bn.s values. gx and gr (either nil if not
// wanted) are overwritten where fresh, else added to.
func (bn batchNormGeom) backwardChannelsAct(c0, c1 int, g, o, x, gx, gr []float32, freshX, freshR bool, gm []float32, weight, bias *Tensor, relu, useBatch bool, mean, invStd []float32) {
	n, c, s := bn.n, bn.c, bn.s
	if !relu {
		o = nil // g' = g
	}
	// Σg' and Σg'·x̂ over each channel give the affine gradients and the
	// batch-statistics terms of dx.
	nc := c1 - c0
	sums := make([]float64, 2*nc)
	sg, sgh := sums[:nc], sums[nc:]
	for i := 0; i < n; i++ {
		for ch := c0; ch < c1; ch++ {
			off := (i*c + ch) * s
			gi, oi, xi := g[off:off+s], rowOf(o, off, s), x[off:off+s]
			if gr != nil {
				// The residual's gradient is g' (g, +0 where o ≤ 0), written
				// or added by the vector loops; the sums read it back.
				dst := gr[off : off+s]
				switch {
				case oi == nil && freshR:
					copy(dst, gi)
				case oi == nil:
					kernels.Add(dst, gi)
				case freshR:
					kernels.ReluBackwardSet(dst, gi, oi)
					gi, oi = dst, nil
				default:
					kernels.ReluBackwardSet(gm[:s], gi, oi)
					kernels.Add(dst, gm[:s])
					gi, oi = gm[:s], nil
				}
			}
			a, b := kernels.BNGradSums(gi, oi, xi, mean[ch], invStd[ch])
			sg[ch-c0], sgh[ch-c0] = sg[ch-c0]+a, sgh[ch-c0]+b
		}
	}
	for ch := c0; ch < c1; ch++ {
		if weight.needsGrad() {
			weight.accGrad()[ch] += float32(sgh[ch-c0])
		}
		if bias.needsGrad() {
			bias.accGrad()[ch] += float32(sg[ch-c0])
		}
	}
	if gx == nil {
		return
	}
	m := bn.m()
	for i := 0; i < n; i++ {
		for ch := c0; ch < c1; ch++ {
			a, _ := bn.affine(weight, nil, ch)
			mu, is := mean[ch], invStd[ch]
			k := a * is
			off := (i*c + ch) * s
			gi, oi, dst := g[off:off+s], rowOf(o, off, s), gx[off:off+s]
			if useBatch {
				mg, mgh := float32(sg[ch-c0]/float64(m)), float32(sgh[ch-c0]/float64(m))
				kernels.BNGradInput(dst, gi, oi, x[off:off+s], mu, is, k, mg, mgh, !freshX)
				continue
			}
			// Constant statistics: dx = g'·γ/σ.
			for j, gv := range gi {
				if oi != nil && !(oi[j] > 0) {
					gv = 0
				}
				if freshX {
					dst[j] = gv * k
				} else {
					dst[j] += gv * k
				}
			}
		}
	}
}
