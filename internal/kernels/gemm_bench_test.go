package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchShape is one SGEMM benchmark case (the cases of `gotrain bench gemm`).
type benchShape struct {
	m, n, k        int
	transA, transB bool
}

// benchShapes are the square cases plus the MNIST MLP's and CNN's GEMMs.
var benchShapes = []benchShape{
	{512, 512, 512, false, false},
	{1024, 1024, 1024, false, false},
	{64, 512, 784, false, true},  // MLP fc1 forward x·Wᵀ
	{64, 512, 512, false, true},  // MLP fc2 forward
	{64, 10, 512, false, true},   // MLP fc3 forward
	{512, 784, 64, true, false},  // MLP fc1 dW = gᵀ·x
	{64, 784, 512, false, false}, // MLP fc1 dX = g·W
	{64, 576, 288, false, false}, // CNN conv2 forward per image
	{288, 64, 576, false, true},  // CNN conv2 dWᵀ = col·gᵀ
	{288, 576, 64, true, false},  // CNN conv2 dcol
	{32, 676, 9, false, false},   // CNN conv1 forward
}

// gptBenchShapes are the default GPT's Linear products at batch 32×128
// (rows 4096, width 128): forward x·Wᵀ, dX = g·W and dW = gᵀ·x.
var gptBenchShapes = []benchShape{
	{4096, 384, 128, false, true},  // GPT c_attn forward
	{4096, 128, 512, false, true},  // GPT mlp.c_proj forward
	{4096, 128, 384, false, false}, // GPT c_attn dX
	{4096, 512, 128, false, false}, // GPT mlp.c_proj dX
	{384, 128, 4096, true, false},  // GPT c_attn dW
	{128, 512, 4096, true, false},  // GPT mlp.c_proj dW
	{256, 128, 4096, true, false},  // GPT lm_head dW
}

func BenchmarkSgemm(b *testing.B) {
	for _, impl := range impls() {
		for _, s := range append(benchShapes[:len(benchShapes):len(benchShapes)], gptBenchShapes...) {
			name := fmt.Sprintf("%s/m=%d,n=%d,k=%d,t=%s", impl.name, s.m, s.n, s.k, transName(s.transA, s.transB))
			b.Run(name, func(b *testing.B) {
				benchShapeRun(b, s, func(a []float32, lda int, bb []float32, ldb int, c []float32) {
					sgemmWith(impl, 1, s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, nil, c, s.n)
				})
			})
		}
	}
}

// benchShapeRun times run on random operands of s (C of row stride n)
// and reports GFLOP/s.
func benchShapeRun(b *testing.B, s benchShape, run func(a []float32, lda int, bb []float32, ldb int, c []float32)) {
	a, lda, bb, ldb, c := s.operands()
	for b.Loop() {
		run(a, lda, bb, ldb, c)
	}
	b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// operands returns random A, B and C of s, stored densely (C of row
// stride n), with A's and B's row strides.
func (s benchShape) operands() (a []float32, lda int, bb []float32, ldb int, c []float32) {
	r := rand.New(rand.NewPCG(1, 2))
	a, bb, c = randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), randSlice(r, s.m*s.n)
	lda, ldb = s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	return a, lda, bb, ldb, c
}

func transName(a, b bool) string {
	s := [2]byte{'N', 'N'}
	if a {
		s[0] = 'T'
	}
	if b {
		s[1] = 'T'
	}
	return string(s[:])
}

// bf16BenchShapes are the square cases, NN and NT (x·Wᵀ), for SgemmBF16.
var bf16BenchShapes = []benchShape{
	{512, 512, 512, false, false},
	{512, 512, 512, false, true},
	{1024, 1024, 1024, false, false},
	{1024, 1024, 1024, false, true},
}

// BenchmarkSgemmBF16 runs SgemmBF16 on one thread, on each kernel this
// machine can run (amx, avx512bf16: both where the CPU has both) and
// emulated, on the square cases and, on the kernels, on the
// training shapes of BenchmarkSgemm; GFLOP/s are comparable with it. The
// fp32 cases run Sgemm's implementation on the square cases, NT included
// (which BenchmarkSgemm lacks), for the bf16/fp32 ratio.
func BenchmarkSgemmBF16(b *testing.B) {
	for _, s := range bf16BenchShapes {
		name := fmt.Sprintf("fp32-%s/m=%d,n=%d,k=%d,t=%s", gemm.name, s.m, s.n, s.k, transName(s.transA, s.transB))
		b.Run(name, func(b *testing.B) {
			benchShapeRun(b, s, func(a []float32, lda int, bb []float32, ldb int, c []float32) {
				sgemmWith(gemm, 1, s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, nil, c, s.n)
			})
		})
	}
	for _, native := range bf16Paths() {
		shapes := bf16BenchShapes
		if native != bf16Emulated {
			shapes = append(shapes[:len(shapes):len(shapes)], benchShapes[2:]...)
		}
		for _, s := range shapes {
			name := fmt.Sprintf("%s/m=%d,n=%d,k=%d,t=%s", bf16PathName(native), s.m, s.n, s.k, transName(s.transA, s.transB))
			b.Run(name, func(b *testing.B) {
				benchShapeRun(b, s, func(a []float32, lda int, bb []float32, ldb int, c []float32) {
					sgemmBF16(native, 1, s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
				})
			})
		}
	}
}
