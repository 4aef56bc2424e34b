package tensor

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/internal/kernels"
)

// layerNormMinRows is the number of rows per goroutine below which
// LayerNorm stays on one goroutine.
const layerNormMinRows = 64

// LayerNorm normalises x over its last dimension D to zero mean and unit
// variance (biased, as PyTorch's F.layer_norm), then scales by weight and
// shifts by bias ([D] each, either may be nil). It is one fused primitive:
// forward keeps only each row's mean and 1/σ, and backward computes
//
//	dx = (ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) / σ,  ĝ = g·weight
//
// with dweight = Σ g·x̂ and dbias = Σ g over the rows.
func LayerNorm(x, weight, bias *Tensor, eps float32) *Tensor {
	if x.Dim() == 0 {
		panic("tensor: LayerNorm of a 0-d tensor")
	}
	d := x.shape[x.Dim()-1]
	for _, p := range []*Tensor{weight, bias} {
		if p != nil && (p.Dim() != 1 || p.shape[0] != d) {
			panic(fmt.Sprintf("tensor: LayerNorm: weight/bias %v does not match input %v (want [%d])", p.shape, x.shape, d))
		}
	}
	rows := 0
	if d > 0 {
		rows = len(x.data) / d
	}
	out := &Tensor{data: getBuf(len(x.data)), shape: append([]int(nil), x.shape...)}
	stats := make([]float32, 2*rows) // mean, 1/σ per row
	// The row kernels take a weight and a bias: ones and zeros stand in
	// for missing ones.
	w, b := layerNormAffine(weight, bias, d)
	parallelFor(rows, layerNormMinRows, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			layerNormRow(out.data[r*d:(r+1)*d], x.data[r*d:(r+1)*d], w, b, stats[2*r:2*r+2], eps)
		}
	})
	return recordLayerNorm(out, x, weight, bias, w, stats)
}

// layerNormRow normalises one row xr into or and keeps its mean and 1/σ
// in st.
func layerNormRow(or, xr, w, b, st []float32, eps float32) {
	d := len(xr)
	// Sums in float32 with several partial sums (the vector kernels), as
	// PyTorch's kernel keeps; one sequential float64 chain per row was the
	// cost of the op.
	m := kernels.Sum(xr) / float32(d)
	ss := kernels.SumSqDev(xr, m)
	rstd := float32(1 / math.Sqrt(float64(ss)/float64(d)+float64(eps)))
	st[0], st[1] = m, rstd
	kernels.LayerNormAffine(or, xr, w, b, m, rstd)
}

// recordLayerNorm records out = LayerNorm(x, weight, bias) with its
// backward pass; w is the weight's data (ones when weight is nil) and
// stats each row's mean and 1/σ.
func recordLayerNorm(out, x, weight, bias *Tensor, w, stats []float32) *Tensor {
	d := x.shape[x.Dim()-1]
	rows := 0
	if d > 0 {
		rows = len(x.data) / d
	}
	return record(out, "layer_norm", func(g []float32) {
		var gx, gw, gb []float32
		fresh := false // gx not yet holding anything: written, not added to
		if x.needsGrad() {
			gx, fresh = x.gradDst()
		}
		if weight.needsGrad() {
			gw = weight.accGrad()
		}
		if bias.needsGrad() {
			gb = bias.accGrad()
		}
		threads := max(1, kernels.NumThreads())
		// Per-worker partial sums of dweight and dbias, merged after.
		partW := make([][]float32, threads)
		partB := make([][]float32, threads)
		used := parallelFor(rows, layerNormMinRows, func(wk, lo, hi int) {
			pw, pb := make([]float32, d), make([]float32, d)
			partW[wk], partB[wk] = pw, pb
			inv := 1 / float32(d)
			for r := lo; r < hi; r++ {
				xr, gr := x.data[r*d:(r+1)*d], g[r*d:(r+1)*d]
				m, rstd := stats[2*r], stats[2*r+1]
				sg, sgx := kernels.LayerNormGradStats(pw, pb, xr, gr, w, m, rstd)
				if gx != nil {
					kernels.LayerNormGradInput(gx[r*d:(r+1)*d], xr, gr, w, m, rstd, sg*inv, sgx*inv, !fresh)
				}
			}
		})
		for wk := range used {
			if gw != nil {
				addTo(gw, partW[wk])
			}
			if gb != nil {
				addTo(gb, partB[wk])
			}
		}
	}, x, weight, bias)
}

// layerNormAffine returns the data of weight and bias, with ones for a
// missing weight and zeros for a missing bias.
func layerNormAffine(weight, bias *Tensor, d int) (w, b []float32) {
	if weight != nil {
		w = weight.data
	} else {
		w = make([]float32, d)
		for i := range w {
			w[i] = 1
		}
	}
	if bias != nil {
		b = bias.data
	} else {
		b = make([]float32, d)
	}
	return w, b
}
