package tensor

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
)

// reductionScale checks a reduction name and returns the factor applied to
// the summed loss over n items.
func reductionScale(op, reduction string, n int) float32 {
	switch reduction {
	case "mean":
		if n == 0 {
			return float32(math.NaN()) // PyTorch: mean over nothing is NaN
		}
		return 1 / float32(n)
	case "sum":
		return 1
	}
	panic(fmt.Sprintf("tensor: %s: reduction %q is not \"mean\" or \"sum\"", op, reduction))
}

func checkTargets(op string, shape []int, target []int) (n, c int) {
	if len(shape) != 2 {
		panic(fmt.Sprintf("tensor: %s: input %v is not [N, C]", op, shape))
	}
	n, c = shape[0], shape[1]
	if len(target) != n {
		panic(fmt.Sprintf("tensor: %s: %d targets for input %v", op, len(target), shape))
	}
	for i, t := range target {
		if t < 0 || t >= c {
			panic(fmt.Sprintf("tensor: %s: target[%d] = %d out of range [0, %d)", op, i, t, c))
		}
	}
	return n, c
}

// CrossEntropy is the cross-entropy loss of logits [N, C] against class
// indices target (len N), reduced by "mean" or "sum": log-softmax and NLL
// fused, computed stably. The gradient is (softmax − onehot)·scale.
func CrossEntropy(logits *Tensor, target []int, reduction string) *Tensor {
	n, c := checkTargets("CrossEntropy", logits.shape, target)
	scale := reductionScale("CrossEntropy", reduction, n)
	// probs keeps softmax for backward; only allocated when needed.
	var probs []float32
	track := GradEnabled() && logits.requiresGrad
	if track {
		probs = make([]float32, len(logits.data))
	}
	var total float64
	for i := 0; i < n; i++ {
		row := logits.data[i*c : (i+1)*c]
		m := float32(math.Inf(-1))
		for _, v := range row {
			m = max(m, v)
		}
		var sum float64
		for j, v := range row {
			e := math.Exp(float64(v - m))
			if track {
				probs[i*c+j] = float32(e)
			}
			sum += e
		}
		lse := float64(m) + math.Log(sum)
		total += lse - float64(row[target[i]])
		if track {
			inv := float32(1 / sum)
			for j := range c {
				probs[i*c+j] *= inv
			}
		}
	}
	out := Scalar(float32(total) * scale)
	return record(out, "cross_entropy", func(g []float32) {
		gs := g[0] * scale
		gx := logits.accGrad()
		for i := 0; i < n; i++ {
			for j := 0; j < c; j++ {
				gx[i*c+j] += gs * probs[i*c+j]
			}
			gx[i*c+target[i]] -= gs
		}
	}, logits)
}

// NLLLoss is the negative log-likelihood of log-probabilities [N, C] at the
// target classes, reduced by "mean" or "sum".
func NLLLoss(logProbs *Tensor, target []int, reduction string) *Tensor {
	n, c := checkTargets("NLLLoss", logProbs.shape, target)
	scale := reductionScale("NLLLoss", reduction, n)
	var total float64
	for i, t := range target {
		total -= float64(logProbs.data[i*c+t])
	}
	out := Scalar(float32(total) * scale)
	return record(out, "nll_loss", func(g []float32) {
		gx := logProbs.accGrad()
		for i, t := range target {
			gx[i*c+t] -= g[0] * scale
		}
	}, logProbs)
}

// MSELoss is the squared error between a and b (same shape), reduced by
// "mean" or "sum".
func MSELoss(a, b *Tensor, reduction string) *Tensor {
	if !sameShape(a.shape, b.shape) {
		panic(fmt.Sprintf("tensor: MSELoss: shapes %v and %v differ", a.shape, b.shape))
	}
	scale := reductionScale("MSELoss", reduction, len(a.data))
	var total float64
	for i, x := range a.data {
		d := float64(x - b.data[i])
		total += d * d
	}
	out := Scalar(float32(total) * scale)
	return record(out, "mse_loss", func(g []float32) {
		k := 2 * g[0] * scale
		if a.needsGrad() {
			ga := a.accGrad()
			for i, x := range a.data {
				ga[i] += k * (x - b.data[i])
			}
		}
		if b.needsGrad() {
			gb := b.accGrad()
			for i, x := range a.data {
				gb[i] -= k * (x - b.data[i])
			}
		}
	}, a, b)
}

// CrossEntropyIgnore is the cross-entropy of logits [..., C] (the last
// dimension holds the classes, so [B, T, V] language-model logits need no
// reshape) against one class index per row, skipping rows whose target is
// ignoreIndex, like F.cross_entropy(logits.view(-1, C), target.view(-1),
// ignore_index=ignoreIndex). "mean" divides by the number of rows not
// ignored (NaN when there are none, as in PyTorch); "sum" adds them.
// Backward keeps only each row's log-sum-exp and recomputes the softmax.
// Rows spread over goroutines. A target outside [0, C) that is not
// ignoreIndex panics naming it.
func CrossEntropyIgnore(logits *Tensor, target []int, ignoreIndex int, reduction string) *Tensor {
	if logits.Dim() < 1 {
		panic(fmt.Sprintf("tensor: CrossEntropyIgnore: logits %v have no class dimension", logits.shape))
	}
	c := logits.shape[logits.Dim()-1]
	n := 0
	if c > 0 {
		n = len(logits.data) / c
	}
	if len(target) != n {
		panic(fmt.Sprintf("tensor: CrossEntropyIgnore: %d targets for logits %v (%d rows)", len(target), logits.shape, n))
	}
	count := 0
	for i, t := range target {
		if t == ignoreIndex {
			continue
		}
		if t < 0 || t >= c {
			panic(fmt.Sprintf("tensor: CrossEntropyIgnore: target[%d] = %d out of range [0, %d)", i, t, c))
		}
		count++
	}
	scale := reductionScale("CrossEntropyIgnore", reduction, count)
	target = append([]int(nil), target...)
	lse := make([]float32, n)
	partial := make([]float64, kernels.NumThreads())
	parallelFor(n, 256, func(w, lo, hi int) {
		var total float64
		tmp := make([]float32, c)
		for i := lo; i < hi; i++ {
			if target[i] == ignoreIndex {
				continue
			}
			row := logits.data[i*c : (i+1)*c]
			m := kernels.MaxOf(row)
			l := m + float32(math.Log(float64(kernels.ExpShiftSum(tmp, row, m))))
			lse[i] = l
			total += float64(l) - float64(row[target[i]])
		}
		partial[w] = total
	})
	var total float64
	for _, p := range partial {
		total += p
	}
	out := Scalar(float32(total) * scale)
	return record(out, "cross_entropy", func(g []float32) {
		gs := g[0] * scale
		// A fresh gradient buffer (the logits of a model) is written
		// row by row, not cleared and added to.
		gx, fresh := logits.gradDst()
		parallelFor(n, 256, func(_, lo, hi int) {
			var tmp []float32
			if !fresh {
				tmp = make([]float32, c)
			}
			for i := lo; i < hi; i++ {
				row, gr := logits.data[i*c:(i+1)*c], gx[i*c:(i+1)*c]
				if target[i] == ignoreIndex {
					if fresh {
						clear(gr)
					}
					continue
				}
				if fresh { // gr = gs·softmax(row)
					kernels.ExpShiftSum(gr, row, lse[i])
					kernels.Scale(gs, gr)
				} else {
					kernels.ExpShiftSum(tmp, row, lse[i])
					kernels.Axpy(gs, tmp, gr)
				}
				gr[target[i]] -= gs
			}
		})
	}, logits)
}
