package models

import (
	"testing"
	"time"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// benchStep times the model part of one training step at batch 64: zero
// the gradients, forward, cross-entropy, backward (the optimizer update
// lives in package optim). Reports samples/s next to ns/op.
func benchStep(b *testing.B, m nn.Module) {
	const batch = 64
	rng := tensor.NewRNG(1)
	x := tensor.Rand(rng, batch, 1, 28, 28)
	target := make([]int, batch)
	for i := range target {
		target[i] = rng.Intn(10)
	}
	params := nn.Parameters(m)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, p := range params {
			p.ZeroGrad()
		}
		if err := nn.CrossEntropy(m.Forward(x), target).Backward(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "samples/s")
}

func BenchmarkMLPStep(b *testing.B)      { benchStep(b, MLP()) }
func BenchmarkMNISTNetStep(b *testing.B) { benchStep(b, MNISTNet()) }

// BenchmarkGPTStep times the model part of one training step of the
// default GPT (4 layers, 4 heads, width 128, block 128, vocabulary 256)
// at batch 32: zero the gradients, forward, cross-entropy, backward.
// Reports tokens/s next to ns/op; GOTRAIN_NUM_THREADS sets the threads.
func BenchmarkGPTStep(b *testing.B) { benchGPTStep(b, tensor.FP32) }

// BenchmarkGPTStepBF16 is BenchmarkGPTStep under bf16 autocast, on the
// native bf16 kernel (skipped where there is none): the side-by-side
// figure for torch_gpt_step_bench.py's bf16.
func BenchmarkGPTStepBF16(b *testing.B) {
	if !tensor.BF16Native() {
		b.Skip("no native bf16 kernel on this CPU")
	}
	benchGPTStep(b, tensor.BF16)
}

// gptBenchBatch returns the default GPT and a batch of 32 random windows
// of its block size: ids, targets and the token count.
func gptBenchBatch() (m *GPTModel, cfg GPTConfig, ids, targets []int, n int) {
	cfg = DefaultGPTConfig()
	m = GPT(cfg)
	rng := tensor.NewRNG(1)
	n = gptBenchBatchSize * cfg.BlockSize
	ids, targets = make([]int, n), make([]int, n)
	for i := range ids {
		ids[i], targets[i] = rng.Intn(cfg.VocabSize), rng.Intn(cfg.VocabSize)
	}
	return m, cfg, ids, targets, n
}

// gptBenchBatchSize is the batch of the GPT benchmarks (the job's default).
const gptBenchBatchSize = 32

func benchGPTStep(b *testing.B, p tensor.Precision) {
	const batch = gptBenchBatchSize
	m, cfg, ids, targets, n := gptBenchBatch()
	params := nn.Parameters(m)
	step := func() {
		for _, p := range params {
			p.ZeroGrad()
		}
		var loss *tensor.Tensor
		if err := tensor.Autocast(p, func() { _, loss = m.Loss(ids, targets, batch, cfg.BlockSize) }); err != nil {
			b.Fatal(err)
		}
		if err := loss.Backward(); err != nil {
			b.Fatal(err)
		}
	}
	step()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPUTime()
	for b.Loop() {
		step()
	}
	reportTokens(b, n, cpu0)
}

// BenchmarkGPTTrainStep times one whole training step of the default GPT
// as `gotrain train gpt` takes it at batch 32: zero the gradients,
// forward, cross-entropy (the logits recycled), backward, gradient
// clipping at 1.0 and AdamW with weight decay on the matrices only.
// Reports tokens/s; GOTRAIN_NUM_THREADS sets the threads.
func BenchmarkGPTTrainStep(b *testing.B) {
	const batch = gptBenchBatchSize
	m, cfg, ids, targets, n := gptBenchBatch()
	params := nn.Parameters(m)
	var decay, noDecay []*tensor.Tensor
	for _, p := range params {
		if p.Dim() >= 2 {
			decay = append(decay, p)
		} else {
			noDecay = append(noDecay, p)
		}
	}
	opt := optim.NewAdamW(decay, 1e-3, optim.Betas(0.9, 0.95), optim.WeightDecay(0.1))
	opt.AddParamGroup(noDecay, optim.WeightDecay(0))
	step := func() {
		opt.ZeroGrad()
		logits, loss := m.Loss(ids, targets, batch, cfg.BlockSize)
		tensor.Recycle(logits)
		if err := loss.Backward(); err != nil {
			b.Fatal(err)
		}
		optim.ClipGradNorm(params, 1)
		opt.Step()
	}
	step()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPUTime()
	for b.Loop() {
		step()
	}
	reportTokens(b, n, cpu0)
}

// reportTokens reports tokens/s of wall time and, since the machines these
// run on are shared, cpu-tokens/s and cpu-ms/op of this process's CPU time
// (which other processes move much less; with GOMAXPROCS=1 and one thread
// it is the step's work plus the garbage collector's).
func reportTokens(b *testing.B, perOp int, cpu0 time.Duration) {
	b.ReportMetric(float64(perOp*b.N)/b.Elapsed().Seconds(), "tokens/s")
	if cpu := processCPUTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(perOp*b.N)/cpu.Seconds(), "cpu-tokens/s")
		b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu-ms/op")
	}
}
