package models

import (
	"os"
	"strconv"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// resnetBenchBatch is BenchmarkResNet18Step's batch: GOTRAIN_BENCH_BATCH,
// else 128 (the usual CIFAR batch).
func resnetBenchBatch(b *testing.B) int {
	s := os.Getenv("GOTRAIN_BENCH_BATCH")
	if s == "" {
		return 128
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 2 {
		b.Fatalf("GOTRAIN_BENCH_BATCH=%q: want an integer of at least 2", s)
	}
	return n
}

// BenchmarkResNet18Step times one whole training step of ResNet-18 with
// the CIFAR stem on 32×32 images, 10 classes, in training mode: zero the
// gradients, forward, cross-entropy, backward, SGD with momentum 0.9 and
// weight decay 5e-4. The batch is 128 unless GOTRAIN_BENCH_BATCH says
// otherwise; GOTRAIN_NUM_THREADS sets the threads. Reports images/s (wall
// and CPU time). testdata/torch_resnet_step_bench.py is the same step in
// PyTorch; docs/bench/resnet_vs_torch2.sh runs both.
func BenchmarkResNet18Step(b *testing.B) {
	batch := resnetBenchBatch(b)
	nn.SetSeed(1)
	m := ResNet18(10, "cifar")
	rng := tensor.NewRNG(1)
	x := tensor.Randn(rng, batch, 3, 32, 32)
	target := make([]int, batch)
	for i := range target {
		target[i] = rng.Intn(10)
	}
	opt := optim.NewSGD(nn.Parameters(m), 0.1, optim.Momentum(0.9), optim.WeightDecay(5e-4))
	step := func() {
		opt.ZeroGrad()
		logits := m.Forward(x)
		loss := nn.CrossEntropy(logits, target)
		if err := loss.Backward(); err != nil {
			b.Fatal(err)
		}
		opt.Step()
	}
	step()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPUTime()
	for b.Loop() {
		step()
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "images/s")
	if cpu := processCPUTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(batch*b.N)/cpu.Seconds(), "cpu-images/s")
	}
}
