package models

import (
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// benchThreadSplit runs step alternately at one thread and at
// GOTRAIN_NUM_THREADS (at least 2), the order swapped every iteration so
// that drift in a shared machine's load hits both, and reports the wall
// time scaling of the whole step, of its top-level GEMMs (Sgemm and
// SgemmBias: the linear layers) and of everything else, which shows which
// part holds the step's thread scaling back.
func benchThreadSplit(b *testing.B, step func()) {
	threads := max(kernels.NumThreads(), 2)
	defer kernels.SetNumThreads(kernels.NumThreads())
	var mu sync.Mutex
	var gemm time.Duration
	prev := kernels.SetGemmObserver(func(c kernels.GemmCall) {
		if !c.Serial {
			mu.Lock()
			gemm += c.Elapsed
			mu.Unlock()
		}
	})
	defer kernels.SetGemmObserver(prev)
	counts := [2]int{1, threads}
	var wall, gemms [2]time.Duration
	for _, t := range counts { // warm both
		kernels.SetNumThreads(t)
		step()
	}
	iter := 0
	b.ResetTimer()
	for b.Loop() {
		order := []int{0, 1}
		if iter%2 == 1 {
			order = []int{1, 0}
		}
		iter++
		for _, i := range order {
			kernels.SetNumThreads(counts[i])
			mu.Lock()
			gemm = 0
			mu.Unlock()
			t0 := time.Now()
			step()
			wall[i] += time.Since(t0)
			mu.Lock()
			gemms[i] += gemm
			mu.Unlock()
		}
	}
	b.StopTimer()
	ratio := func(x, y time.Duration) float64 { return x.Seconds() / y.Seconds() }
	b.ReportMetric(float64(threads), "threads")
	b.ReportMetric(ratio(wall[0], wall[1]), "step-scaling")
	b.ReportMetric(ratio(gemms[0], gemms[1]), "gemm-scaling")
	b.ReportMetric(ratio(wall[0]-gemms[0], wall[1]-gemms[1]), "rest-scaling")
	b.ReportMetric(ratio(gemms[0], wall[0]), "gemm-share-1t")
	b.ReportMetric(wall[0].Seconds()*1e3/float64(iter), "ms-1t")
}

// BenchmarkMLPStepThreads is the MNIST MLP's training step as `gotrain
// train mnist` takes it (batch 64, Adadelta) under benchThreadSplit.
func BenchmarkMLPStepThreads(b *testing.B) {
	const batch = 64
	m := MLP()
	rng := tensor.NewRNG(1)
	x := tensor.Rand(rng, batch, 1, 28, 28)
	target := make([]int, batch)
	for i := range target {
		target[i] = rng.Intn(10)
	}
	opt := optim.NewAdadelta(nn.Parameters(m), 1)
	benchThreadSplit(b, func() {
		opt.ZeroGrad()
		if err := nn.CrossEntropy(m.Forward(x), target).Backward(); err != nil {
			b.Fatal(err)
		}
		opt.Step()
	})
}

// BenchmarkGPTTrainStepThreads is BenchmarkGPTTrainStep's whole step
// under benchThreadSplit.
func BenchmarkGPTTrainStepThreads(b *testing.B) {
	const batch = gptBenchBatchSize
	m, cfg, ids, targets, _ := gptBenchBatch()
	params := nn.Parameters(m)
	opt := optim.NewAdamW(params, 1e-3, optim.Betas(0.9, 0.95), optim.WeightDecay(0.1))
	benchThreadSplit(b, func() {
		opt.ZeroGrad()
		logits, loss := m.Loss(ids, targets, batch, cfg.BlockSize)
		tensor.Recycle(logits)
		if err := loss.Backward(); err != nil {
			b.Fatal(err)
		}
		optim.ClipGradNorm(params, 1)
		opt.Step()
	})
}
