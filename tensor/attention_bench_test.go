package tensor

import (
	"fmt"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/kernels"
)

// BenchmarkAttention times ScaledDotProductAttention forward and backward
// at T = 512, head dimension 64 (batch 2, 4 heads) on one thread, and
// reports GFLOP/s counted as FlashAttention's papers do: 4·T²·Dh per head
// forward (the two products), 2.5 times that backward, with only the
// visible half of the scores for the causal case. The sgemm cases time
// the same single-threaded GEMM kernel on a square 512 problem and on the
// attention's own QKᵀ shape, the rate the attention is compared with.
func BenchmarkAttention(b *testing.B) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	const batch, heads, t, dh = 2, 4, 512, 64
	for _, causal := range []bool{true, false} {
		name := "full"
		pairs := float64(t * t)
		if causal {
			name = "causal"
			pairs = float64(t*(t+1)) / 2
		}
		b.Run(fmt.Sprintf("%s/T=%d,Dh=%d", name, t, dh), func(b *testing.B) {
			rng := NewRNG(1)
			q, k, v := randT(rng, -1, 1, batch, heads, t, dh), randT(rng, -1, 1, batch, heads, t, dh), randT(rng, -1, 1, batch, heads, t, dh)
			g := randT(rng, -1, 1, batch, heads, t, dh)
			for _, x := range []*Tensor{q, k, v} {
				x.SetRequiresGrad(true)
			}
			step := func() {
				for _, x := range []*Tensor{q, k, v} {
					x.ZeroGrad()
				}
				if err := ScaledDotProductAttention(q, k, v, causal).BackwardWith(g); err != nil {
					b.Fatal(err)
				}
			}
			step()
			b.ResetTimer()
			cpu0 := processCPUTime()
			for b.Loop() {
				step()
			}
			flops := 3.5 * 4 * pairs * dh * batch * heads
			reportRates(b, flops, cpu0)
		})
	}
	for _, s := range [][3]int{{512, 512, 512}, {512, 512, 64}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("sgemm/m=%d,n=%d,k=%d", m, n, k), func(b *testing.B) {
			rng := NewRNG(2)
			x, y, c := randT(rng, -1, 1, m, k), randT(rng, -1, 1, k, n), Zeros(m, n)
			cpu0 := processCPUTime()
			for b.Loop() {
				kernels.SgemmSerial(false, false, m, n, k, 1, x.data, k, y.data, n, 0, c.data, n)
			}
			reportRates(b, 2*float64(m*n*k), cpu0)
		})
	}
}

// reportRates reports GFLOP/s for flops per iteration by wall time and,
// steadier on a shared machine, by this process's CPU time (one thread).
func reportRates(b *testing.B, flops float64, cpu0 time.Duration) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu := processCPUTime() - cpu0; cpu > 0 {
		b.ReportMetric(flops*float64(b.N)/cpu.Seconds()/1e9, "GFLOP/cpu-s")
	}
}

// BenchmarkGPTAttention times the attention of one layer of the default
// GPT (batch 32, T = 128, 4 heads of 32, causal) forward and backward on
// one thread, from the fused [B, T, 3·C] projection to [B, T, C]: "qkv"
// with SelfAttentionQKV's strided heads, "permuted" with the head split
// and merge copies around ScaledDotProductAttention. Reports ms of CPU
// time per op next to ns/op.
func BenchmarkGPTAttention(b *testing.B) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	const batch, t, heads, dh = 32, 128, 4, 32
	c := heads * dh
	for _, v := range []struct {
		name string
		f    func(*Tensor) *Tensor
	}{
		{"qkv", func(x *Tensor) *Tensor { return SelfAttentionQKV(x, heads, true) }},
		{"permuted", func(x *Tensor) *Tensor {
			parts := Unbind(Permute(x.Reshape(batch, t, 3, heads, dh), 2, 0, 3, 1, 4), 0)
			y := ScaledDotProductAttention(parts[0], parts[1], parts[2], true)
			return Permute(y, 0, 2, 1, 3).Reshape(batch, t, c)
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			rng := NewRNG(3)
			qkv, g := randT(rng, -1, 1, batch, t, 3*c), randT(rng, -1, 1, batch, t, c)
			qkv.SetRequiresGrad(true)
			step := func() {
				qkv.ZeroGrad()
				if err := v.f(MulScalar(qkv, 1)).BackwardWith(g); err != nil {
					b.Fatal(err)
				}
			}
			step()
			b.ResetTimer()
			cpu0 := processCPUTime()
			for b.Loop() {
				step()
			}
			b.ReportMetric((processCPUTime()-cpu0).Seconds()*1e3/float64(b.N), "cpu-ms/op")
		})
	}
}
