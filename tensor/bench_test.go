package tensor

import (
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// benchParam makes a parameter with PyTorch's default Linear/Conv2d
// initialisation range ±1/√fanIn.
func benchParam(rng *RNG, fanIn int, shape ...int) *Tensor {
	bound := float32(1 / math.Sqrt(float64(fanIn)))
	p := Zeros(shape...)
	rng.FillUniform(p, -bound, bound)
	return p.SetRequiresGrad(true)
}

// benchStep runs one SGD training step (zero grad, forward, backward,
// update) on MNIST-shaped random data. testdata/torch_step_bench.py times
// the same step in PyTorch for a side-by-side comparison.
func benchStep(b *testing.B, batch int, params []*Tensor, forward func(x *Tensor) *Tensor) {
	rng := NewRNG(1)
	x := Rand(rng, batch, 1, 28, 28)
	target := make([]int, batch)
	for i := range target {
		target[i] = rng.Intn(10)
	}
	step := func() {
		for _, p := range params {
			p.ZeroGrad()
		}
		loss := CrossEntropy(forward(x), target, "mean")
		if err := loss.Backward(); err != nil {
			b.Fatal(err)
		}
		for _, p := range params {
			kernels.Axpy(-0.01, p.Grad().data, p.data)
		}
	}
	step() // allocate gradients and warm pools
	b.ResetTimer()
	cpu0 := processCPUTime()
	for b.Loop() {
		step()
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "samples/s")
	// On a shared machine wall time swings with other load; samples per
	// CPU-second is the steadier figure to compare with a one-thread run.
	if cpu := processCPUTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(batch*b.N)/cpu.Seconds(), "samples/cpu-s")
	}
}

// BenchmarkMLPStep is one training step of the 784-512-512-10 MLP on a
// batch of 64.
func BenchmarkMLPStep(b *testing.B) {
	rng := NewRNG(2)
	w1, b1 := benchParam(rng, 784, 512, 784), benchParam(rng, 784, 512)
	w2, b2 := benchParam(rng, 512, 512, 512), benchParam(rng, 512, 512)
	w3, b3 := benchParam(rng, 512, 10, 512), benchParam(rng, 512, 10)
	benchStep(b, 64, []*Tensor{w1, b1, w2, b2, w3, b3}, func(x *Tensor) *Tensor {
		h := ReLU(Linear(Flatten(x, 1), w1, b1))
		h = ReLU(Linear(h, w2, b2))
		return Linear(h, w3, b3)
	})
}

// cnnBenchParams returns the MNIST Net's weights and biases, initialised
// as PyTorch does (conv1, conv2, fc1, fc2).
func cnnBenchParams() (c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b *Tensor) {
	rng := NewRNG(3)
	c1w, c1b = benchParam(rng, 9, 32, 1, 3, 3), benchParam(rng, 9, 32)
	c2w, c2b = benchParam(rng, 288, 64, 32, 3, 3), benchParam(rng, 288, 64)
	f1w, f1b = benchParam(rng, 9216, 128, 9216), benchParam(rng, 9216, 128)
	f2w, f2b = benchParam(rng, 128, 10, 128), benchParam(rng, 128, 10)
	return
}

// BenchmarkCNNStep is one training step of the pytorch/examples MNIST Net
// (conv32-conv64-maxpool-dropout-fc128-dropout-fc10) on a batch of 64.
func BenchmarkCNNStep(b *testing.B) {
	c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b := cnnBenchParams()
	drop := NewRNG(4)
	one, zero := [2]int{1, 1}, [2]int{0, 0}
	benchStep(b, 64, []*Tensor{c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b}, func(x *Tensor) *Tensor {
		h := ReLU(Conv2d(x, c1w, c1b, one, zero))
		h = ReLU(Conv2d(h, c2w, c2b, one, zero))
		h = Dropout(MaxPool2d(h, [2]int{2, 2}, [2]int{2, 2}, zero), 0.25, true, drop)
		h = ReLU(Linear(Flatten(h, 1), f1w, f1b))
		h = Dropout(h, 0.5, true, drop)
		return Linear(h, f2w, f2b)
	})
	reportCNNFlops(b)
}

// BenchmarkCNNStepFused is BenchmarkCNNStep as nn.Sequential runs the
// same layers (models.MNISTNet, the `gotrain train mnist --model cnn`
// job): the fused convolutions, Conv2d with the post-ops [ReLU] and [ReLU
// MaxPool2x2], and the results between layers marked freeWithGraph, so
// that each step reuses their storage (and their gradients' storage)
// instead of allocating it afresh.
func BenchmarkCNNStepFused(b *testing.B) {
	c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b := cnnBenchParams()
	drop := NewRNG(4)
	one, zero := [2]int{1, 1}, [2]int{0, 0}
	benchStep(b, 64, []*Tensor{c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b}, func(x *Tensor) *Tensor {
		h1 := Conv2d(x, c1w, c1b, one, zero, PostReLU)
		h2 := Conv2d(h1, c2w, c2b, one, zero, PostReLU, PostMaxPool2x2)
		d1 := Dropout(h2, 0.25, true, drop)
		// Flatten's result is a view of d1's storage: only d1 is marked.
		f := Linear(Flatten(d1, 1), f1w, f1b)
		r := ReLU(f)
		d2 := Dropout(r, 0.5, true, drop)
		for _, t := range []*Tensor{h1, h2, d1, f, r, d2} {
			t.freeWithGraph()
		}
		return Linear(d2, f2w, f2b)
	})
	reportCNNFlops(b)
}

func BenchmarkMaxPool2x2(b *testing.B) {
	x := Randn(NewRNG(1), 64, 64, 24, 24)
	for b.Loop() {
		MaxPool2d(x, [2]int{2, 2}, [2]int{2, 2}, [2]int{0, 0})
	}
}

func BenchmarkDropout(b *testing.B) {
	x := Randn(NewRNG(1), 64, 9216)
	rng := NewRNG(2)
	for b.Loop() {
		Dropout(x, 0.25, true, rng)
	}
}
