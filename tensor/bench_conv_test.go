package tensor

import "testing"

// cnnStepFlops is the multiply-add work (2 flops each) of one training
// step of the MNIST Net at batch 64: every GEMM of the convolutions (conv1
// needs no input gradient) and of the linear layers, forward and backward.
// Elementwise ops, pooling and im2col are not counted: this is the work a
// GEMM-rate bound divides by (see `gotrain bench gemm`, which prints it).
func cnnStepFlops() float64 {
	const n = 64
	conv1 := 2.0 * 32 * 676 * 9 * n     // forward; dW is as large
	conv2 := 2.0 * 64 * 576 * 288 * n   // forward; dW and dX are as large
	fc := 2.0*n*128*9216 + 2.0*n*10*128 // forward; dW and dX are as large
	return 2*conv1 + 3*conv2 + 3*fc
}

// reportCNNFlops adds the rate at which a CNN step benchmark did its GEMM
// work, to set against the SGEMM rate of `gotrain bench gemm`.
func reportCNNFlops(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(cnnStepFlops()*float64(b.N)/s/1e9, "GFLOP/s")
	}
}

// BenchmarkCNNStepFusedBF16Emulated is BenchmarkCNNStepFused under
// emulated bf16 autocast: the cost of the rounding passes on top of
// float32, not the speed of a bf16 kernel.
func BenchmarkCNNStepFusedBF16Emulated(b *testing.B) {
	defer SetBF16Emulation(SetBF16Emulation(true))
	prev := AutocastPrecision()
	autocast.Store(int32(BF16)) // for the whole benchmark, as Autocast would
	defer autocast.Store(int32(prev))
	BenchmarkCNNStepFused(b)
}

// BenchmarkMLPStepBF16Emulated is BenchmarkMLPStep under emulated bf16
// autocast.
func BenchmarkMLPStepBF16Emulated(b *testing.B) {
	defer SetBF16Emulation(SetBF16Emulation(true))
	prev := AutocastPrecision()
	autocast.Store(int32(BF16))
	defer autocast.Store(int32(prev))
	BenchmarkMLPStep(b)
}

// BenchmarkCNNStepFusedUnblocked is BenchmarkCNNStepFused with each
// image's columns built whole (one block of output rows, as before row
// blocking), to measure what blocking for L2 gains on this CPU.
func BenchmarkCNNStepFusedUnblocked(b *testing.B) {
	defer func(f func() int) { convL2Bytes = f }(convL2Bytes)
	convL2Bytes = func() int { return 1 << 40 }
	BenchmarkCNNStepFused(b)
}

// BenchmarkCNNStepFusedBF16 is BenchmarkCNNStepFused under bf16 autocast
// on the native bf16 kernel (skipped where there is none).
func BenchmarkCNNStepFusedBF16(b *testing.B) {
	withNativeBF16(b, BenchmarkCNNStepFused)
}

// BenchmarkMLPStepBF16 is BenchmarkMLPStep under native bf16 autocast.
func BenchmarkMLPStepBF16(b *testing.B) {
	withNativeBF16(b, BenchmarkMLPStep)
}

// withNativeBF16 runs bench with bf16 autocast on for the whole
// benchmark, as Autocast would set it, on the native kernel.
func withNativeBF16(b *testing.B, bench func(*testing.B)) {
	if !BF16Native() {
		b.Skip("no native bf16 kernel on this CPU")
	}
	defer SetBF16Emulation(SetBF16Emulation(false))
	prev := AutocastPrecision()
	autocast.Store(int32(BF16))
	defer autocast.Store(int32(prev))
	bench(b)
}
