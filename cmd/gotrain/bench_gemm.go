package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/internal/kernels"
)

// gemmCase is one SGEMM shape measured by `gotrain bench gemm`.
type gemmCase struct {
	m, n, k        int
	transA, transB bool
}

// gemmCases are square reference sizes and the GEMMs of the MNIST MLP
// (784-512-512-10, batch 64) and of the CNN's im2col convolution per image.
var gemmCases = []gemmCase{
	{512, 512, 512, false, false},    // square
	{1024, 1024, 1024, false, false}, // square
	{64, 512, 784, false, true},      // MLP fc1 forward x·Wᵀ
	{64, 512, 512, false, true},      // MLP fc2 forward
	{64, 10, 512, false, true},       // MLP fc3 forward
	{512, 784, 64, true, false},      // MLP fc1 dW = gᵀ·x
	{64, 784, 512, false, false},     // MLP fc1-input dX = g·W
	{64, 576, 288, false, false},     // CNN conv2 forward
	{64, 288, 576, false, true},      // CNN conv2 dW
	{288, 576, 64, true, false},      // CNN conv2 dcol
	{32, 676, 9, false, false},       // CNN conv1 forward
}

// cnnStepGemms are the GEMMs of one training step of the MNIST Net at
// batch 64 as tensor runs them (per image for the convolutions: count 64),
// for the GEMM-rate bound of the step.
var cnnStepGemms = []stepGemm{
	{gemmCase{32, 676, 9, false, false}, 64},   // conv1 forward W·col
	{gemmCase{32, 9, 676, false, true}, 64},    // conv1 dW = g·colᵀ
	{gemmCase{64, 576, 288, false, false}, 64}, // conv2 forward
	{gemmCase{288, 64, 576, false, true}, 64},  // conv2 dWᵀ = col·gᵀ
	{gemmCase{288, 576, 64, true, false}, 64},  // conv2 dcol = Wᵀ·g
	{gemmCase{64, 128, 9216, false, true}, 1},  // fc1 forward
	{gemmCase{64, 9216, 128, false, false}, 1}, // fc1 dX
	{gemmCase{128, 9216, 64, true, false}, 1},  // fc1 dW
	{gemmCase{64, 10, 128, false, true}, 1},    // fc2 forward
	{gemmCase{64, 128, 10, false, false}, 1},   // fc2 dX
	{gemmCase{10, 128, 64, true, false}, 1},    // fc2 dW
}

// gptStepGemms are the GEMMs of one training step of the default GPT of
// `gotrain train gpt` (4 layers, n_embd 128, 4 heads, block 128, batch
// 32, a byte vocabulary of 256 with lm_head tied to wte): the linear
// layers over the batch's 4096 tokens (forward, dX, dW), and attention's
// products per sequence and head (count 128), at the half of the T×T
// scores a causal mask leaves.
var gptStepGemms = func() []stepGemm {
	const tokens, c, layers, heads, t, vocab = 4096, 128, 4, 4, 128, 256
	const hd, seqHeads = c / heads, 32 * heads
	linear := func(out, in, count int) []stepGemm {
		return []stepGemm{
			{gemmCase{tokens, out, in, false, true}, count},  // forward x·Wᵀ
			{gemmCase{tokens, in, out, false, false}, count}, // dX = g·W
			{gemmCase{out, in, tokens, true, false}, count},  // dW = gᵀ·x
		}
	}
	var g []stepGemm
	g = append(g, linear(3*c, c, layers)...) // attn.c_attn
	g = append(g, linear(c, c, layers)...)   // attn.c_proj
	g = append(g, linear(4*c, c, layers)...) // mlp.c_fc
	g = append(g, linear(c, 4*c, layers)...) // mlp.c_proj
	g = append(g, linear(vocab, c, 1)...)    // lm_head
	// Attention: S = Q·Kᵀ and O = P·V forward; dV = Pᵀ·dO, dP = dO·Vᵀ,
	// dQ = dS·K, dK = dSᵀ·Q backward; a causal kernel needs half of each.
	half := seqHeads * layers / 2
	g = append(g,
		stepGemm{gemmCase{t, t, hd, false, true}, half},  // S = Q·Kᵀ
		stepGemm{gemmCase{t, hd, t, false, false}, half}, // O = P·V
		stepGemm{gemmCase{t, hd, t, true, false}, half},  // dV = Pᵀ·dO
		stepGemm{gemmCase{t, t, hd, false, true}, half},  // dP = dO·Vᵀ
		stepGemm{gemmCase{t, hd, t, false, false}, half}, // dQ = dS·K
		stepGemm{gemmCase{t, hd, t, true, false}, half})  // dK = dSᵀ·Q
	return g
}()

// stepGemm is one GEMM shape of a training step and how many times the
// step runs it.
type stepGemm struct {
	gemmCase
	count int
}

// stepBound returns a step's GEMM work in FLOPs and the seconds it takes
// with every GEMM at the rate measured for its shape.
func stepBound(ctx context.Context, gemms []stepGemm, minTime time.Duration, precision string) (flops, secs float64, err error) {
	rates := map[gemmCase]float64{}
	for _, c := range gemms {
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("bench gemm: %w", err)
		}
		if _, ok := rates[c.gemmCase]; !ok {
			rates[c.gemmCase] = benchGemmCase(c.gemmCase, minTime, precision)
		}
		f := float64(c.count) * c.flops()
		flops += f
		secs += f / (rates[c.gemmCase] * 1e9)
	}
	return flops, secs, nil
}

// newBenchGemmCmd is `gotrain bench gemm`.
func newBenchGemmCmd() *cobra.Command {
	var threads int
	var precision string
	var minTime time.Duration
	cmd := &cobra.Command{
		Use:   "gemm",
		Short: "Measure SGEMM GFLOP/s at the square, MLP and CNN shapes",
		Long: `Measure kernels.Sgemm at 512³, 1024³ and the GEMM shapes of the MNIST MLP
and CNN, printing one line per case. Each case runs for --min-time split into
repeated batches; the best batch is reported, which is the robust figure on a
shared, noisy machine.

The last two lines are the GEMM-rate bounds of a training step of the CNN (the
MNIST Net, batch 64) and of the default GPT of "gotrain train gpt" (batch 32 of
128 tokens; attention counted at the half of its scores a causal mask keeps):
its GEMM work, and the samples (tokens) per second it would train at if every
one of its GEMMs ran at the rate measured for that shape and nothing else took
time:

  step=cnn gflop_per_step= gemm_seconds_per_step= bound_samples_per_s=
  step=gpt gflop_per_step= gemm_seconds_per_step= bound_tokens_per_s=

--precision bf16 multiplies bf16 operands on a bf16 kernel (refused where
there is none); bf16-emulated rounds both operands to bf16 before each float32
SGEMM, so it measures the cost of emulation, not a bf16 kernel.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("threads") {
				threads = kernels.NumThreads()
			} else if err := checkAtLeast("threads", threads, 1); err != nil {
				return err
			}
			if minTime <= 0 {
				return badFlag("min-time", minTime, "must be a positive duration like 300ms")
			}
			if err := checkPrecision(precision); err != nil {
				return err
			}
			prev := kernels.SetNumThreads(threads)
			defer kernels.SetNumThreads(prev)
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			for _, c := range gemmCases {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("bench gemm: %w", err)
				}
				gf := benchGemmCase(c, minTime, precision)
				fmt.Fprintf(out, "m=%d n=%d k=%d trans=%s precision=%s gflops=%.1f\n", c.m, c.n, c.k, transName(c.transA, c.transB), precision, gf)
			}
			flops, secs, err := stepBound(ctx, cnnStepGemms, minTime, precision)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "step=cnn precision=%s gflop_per_step=%.3f gemm_seconds_per_step=%.5f bound_samples_per_s=%.0f\n", precision, flops/1e9, secs, 64/secs)
			flops, secs, err = stepBound(ctx, gptStepGemms, minTime, precision)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "step=gpt precision=%s gflop_per_step=%.3f gemm_seconds_per_step=%.5f bound_tokens_per_s=%.0f\n", precision, flops/1e9, secs, 4096/secs)
			return nil
		},
	}
	// The default is read at run time: NumThreads logs an invalid
	// environment value, which must wait for main's log handler.
	cmd.Flags().IntVar(&threads, "threads", 0, "goroutines per SGEMM call (default: "+kernels.EnvNumThreads+" or GOMAXPROCS)")
	cmd.Flags().DurationVar(&minTime, "min-time", 300*time.Millisecond, "time spent on each case")
	cmd.Flags().StringVar(&precision, "precision", "fp32", "operands in fp32, bf16 (needs a bf16 kernel) or bf16-emulated (rounded, then fp32 SGEMM)")
	return cmd
}

// flops is the case's multiply-add work, 2·m·n·k.
func (c gemmCase) flops() float64 { return 2 * float64(c.m) * float64(c.n) * float64(c.k) }

// benchGemmCase returns the best GFLOP/s over batches of about 5 ms, of
// Sgemm for fp32, SgemmBF16 for bf16, and for bf16-emulated of Sgemm
// after rounding both operands to bf16, as the emulated autocast does.
func benchGemmCase(c gemmCase, minTime time.Duration, precision string) float64 {
	round := precision == "bf16-emulated"
	r := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	a, b, out := fill(c.m*c.k), fill(c.k*c.n), fill(c.m*c.n)
	lda, ldb := c.k, c.n
	if c.transA {
		lda = c.m
	}
	if c.transB {
		ldb = c.k
	}
	ra, rb := a, b
	if round {
		ra, rb = make([]float32, len(a)), make([]float32, len(b))
	}
	run := func() {
		if round {
			kernels.RoundBF16(ra, a)
			kernels.RoundBF16(rb, b)
		}
		gemm := kernels.Sgemm
		if precision == "bf16" {
			gemm = kernels.SgemmBF16
		}
		gemm(c.transA, c.transB, c.m, c.n, c.k, 1, ra, lda, rb, ldb, 0, out, c.n)
	}
	run() // warm caches and packing buffers
	flops := c.flops()
	perBatch := max(1, int(5e-3*100e9/flops)) // ~5 ms at 100 GFLOP/s
	best := 0.0
	for start := time.Now(); time.Since(start) < minTime; {
		t0 := time.Now()
		for i := 0; i < perBatch; i++ {
			run()
		}
		if gf := flops * float64(perBatch) / time.Since(t0).Seconds() / 1e9; gf > best {
			best = gf
		}
	}
	return best
}

func transName(a, b bool) string {
	s := []byte("NN")
	if a {
		s[0] = 'T'
	}
	if b {
		s[1] = 'T'
	}
	return string(s)
}
