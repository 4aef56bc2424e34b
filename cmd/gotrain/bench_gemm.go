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

// gptShape is the GPT whose training step `gotrain bench gemm` bounds:
// the model and batch of `gotrain train gpt` (its defaults unless the
// --gpt-* flags say otherwise).
type gptShape struct {
	layers, heads, embd, block, batch, vocab int
}

// defaultGPT is the default GPT of `gotrain train gpt`: 4 layers, n_embd
// 128, 4 heads, block 128, batch 32, a byte vocabulary of 256.
var defaultGPT = gptShape{layers: 4, heads: 4, embd: 128, block: 128, batch: 32, vocab: 256}

// tokens is the step's batch in tokens.
func (g gptShape) tokens() int { return g.batch * g.block }

// The causal attention kernel's tiles (tensor/attention.go's attnBrCausal
// and attnBcCausal): the bound enumerates the block products that kernel
// runs, so these must follow it (TestGPTStepGemmsAreTheStepsGemms compares
// them with a real step's).
const (
	attnRowsCausal = 32
	attnKeysCausal = 128
)

// gptStepGemms returns the GEMMs one training step of g runs: the linear
// layers over the batch's tokens (forward, dX, dW; lm_head tied to wte)
// and attention's block products per sequence and head as the causal
// FlashAttention kernel runs them. That kernel computes whole 32-row
// blocks up to the last key of each block's last row (10/16 of the T×T
// square at T = 128, 9/16 at 256, not the causal half), and its backward
// recomputes the scores where the keys take more than one block (T >
// 128): seven products (S and O forward; S, dV, dP, dQ and dK backward),
// not six; up to T = 128 it reads the probabilities forward kept. Counting what runs makes the bound the time
// of the step's own GEMMs, so that its fraction measures the rest of the
// step; gptModelFlops is the smaller work the model needs.
func gptStepGemms(g gptShape) []stepGemm {
	return append(gptLinearGemms(g), gptAttentionGemms(g)...)
}

// gptLinearGemms returns the GEMMs of g's linear layers in one training
// step: forward, dX and dW of each over the batch's tokens.
func gptLinearGemms(g gptShape) []stepGemm {
	c, tokens := g.embd, g.tokens()
	linear := func(out, in, count int) []stepGemm {
		return []stepGemm{
			{gemmCase{tokens, out, in, false, true}, count},  // forward x·Wᵀ
			{gemmCase{tokens, in, out, false, false}, count}, // dX = g·W
			{gemmCase{out, in, tokens, true, false}, count},  // dW = gᵀ·x
		}
	}
	var s []stepGemm
	s = append(s, linear(3*c, c, g.layers)...) // attn.c_attn
	s = append(s, linear(c, c, g.layers)...)   // attn.c_proj
	s = append(s, linear(4*c, c, g.layers)...) // mlp.c_fc
	s = append(s, linear(c, 4*c, g.layers)...) // mlp.c_proj
	return append(s, linear(g.vocab, c, 1)...) // lm_head
}

// gptAttentionGemms returns the attention block products of one training
// step of g, over its batch·heads·layers heads.
func gptAttentionGemms(g gptShape) []stepGemm {
	return attentionGemms(g.block, g.embd/g.heads, g.batch*g.heads*g.layers)
}

// attentionGemms returns the block products of the causal attention
// kernel over heads heads of t tokens and head size dh, in the order the
// kernel first runs each shape, with the number of times it runs it.
func attentionGemms(t, dh, heads int) []stepGemm {
	var order []gemmCase
	count := map[gemmCase]int{}
	add := func(m, n, k int, transA, transB bool) {
		c := gemmCase{m, n, k, transA, transB}
		if count[c] == 0 {
			order = append(order, c)
		}
		count[c] += heads
	}
	const br, bc = attnRowsCausal, attnKeysCausal
	// Forward: per block of query rows, S = Q·Kᵀ and O += P·V over the
	// key blocks up to the block's last row.
	for i0 := 0; i0 < t; i0 += br {
		rows := min(br, t-i0)
		for j0, end := 0, min(i0+rows, t); j0 < end; j0 += bc {
			keys := min(bc, end-j0)
			add(rows, keys, dh, false, true)  // S = Q·Kᵀ
			add(rows, dh, keys, false, false) // O += P·V
		}
	}
	// Backward: per key block, the query blocks that see it; the scores
	// are recomputed (unless every key fits in one block, where forward
	// kept the probabilities), then dV, dP, dQ and dK.
	recompute := t > bc
	for j0 := 0; j0 < t; j0 += bc {
		for i0 := j0 / br * br; i0 < t; i0 += br {
			rows := min(br, t-i0)
			keys := min(bc, t-j0, max(min(i0+rows, t)-j0, 0))
			if keys == 0 {
				continue
			}
			if recompute {
				add(rows, keys, dh, false, true) // S = Q·Kᵀ again
			}
			add(rows, keys, dh, false, true)  // dP = dO·Vᵀ
			add(keys, dh, rows, true, false)  // dV += Pᵀ·dO
			add(rows, dh, keys, false, false) // dQ += dS·K
			add(keys, dh, rows, true, false)  // dK += dSᵀ·Q
		}
	}
	s := make([]stepGemm, len(order))
	for i, c := range order {
		s[i] = stepGemm{c, count[c]}
	}
	return s
}

// gptModelFlops is the GEMM work a training step of g needs: its linear
// layers, and attention's six products (S and O forward; dV, dP, dQ and
// dK backward) over the causal half of the T×T scores, without
// recomputation.
func gptModelFlops(g gptShape) float64 {
	t, dh := float64(g.block), float64(g.embd/g.heads)
	return gemmFlops(gptLinearGemms(g)) + 6*float64(g.batch*g.heads*g.layers)*2*t*t*dh/2
}

// gemmFlops is the work of gemms, each counted as often as it runs.
func gemmFlops(gemms []stepGemm) float64 {
	var f float64
	for _, s := range gemms {
		f += float64(s.count) * s.flops()
	}
	return f
}

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
	gpt := defaultGPT
	cmd := &cobra.Command{
		Use:   "gemm",
		Short: "Measure SGEMM GFLOP/s at the square, MLP and CNN shapes",
		Long: `Measure kernels.Sgemm at 512³, 1024³ and the GEMM shapes of the MNIST MLP
and CNN, printing one line per case. Each case runs for --min-time split into
repeated batches; the best batch is reported, which is the robust figure on a
shared, noisy machine.

The last two lines are the GEMM-rate bounds of a training step of the CNN (the
MNIST Net, batch 64) and of a GPT of "gotrain train gpt" (the default one, batch
32 of 128 tokens, unless the --gpt-* flags give another): its GEMM work, and
the samples (tokens) per second it would train at if every one of its GEMMs ran
at the rate measured for that shape and nothing else took time:

  step=cnn precision= gflop_per_step= gemm_seconds_per_step= bound_samples_per_s=
  step=gpt precision= layers= heads= embd= block= batch= vocab= gflop_per_step=
    gemm_seconds_per_step= bound_tokens_per_s= model_gflop_per_step=
    model_bound_tokens_per_s=

The GPT's GEMMs are those its step runs: attention as the causal
FlashAttention kernel tiles it, whole 32-row blocks up to each block's last
key (10/16 of the T×T scores at T = 128), with the scores recomputed in
backward when T is over 128 (seven products, not six; up to 128 backward
reads the probabilities forward kept). model_* is the work the model needs,
attention's six products over the causal half of the scores, at the same
rates (attention's at the mean rate of its block products): the bound of a
kernel that wasted nothing. The bounds are for one thread: with more,
attention's small products are timed one call at a time, while the kernel
runs heads side by side.

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
			if err := gpt.check(); err != nil {
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
			linFlops, linSecs, err := stepBound(ctx, gptLinearGemms(gpt), minTime, precision)
			if err != nil {
				return err
			}
			attFlops, attSecs, err := stepBound(ctx, gptAttentionGemms(gpt), minTime, precision)
			if err != nil {
				return err
			}
			flops, secs = linFlops+attFlops, linSecs+attSecs
			// The model's work at the same rates: attention's smaller work
			// at the mean rate its block products ran at.
			model := gptModelFlops(gpt)
			modelSecs := linSecs + attSecs*(model-linFlops)/attFlops
			tokens := float64(gpt.tokens())
			fmt.Fprintf(out, "step=gpt precision=%s layers=%d heads=%d embd=%d block=%d batch=%d vocab=%d gflop_per_step=%.3f gemm_seconds_per_step=%.5f bound_tokens_per_s=%.0f model_gflop_per_step=%.3f model_bound_tokens_per_s=%.0f\n",
				precision, gpt.layers, gpt.heads, gpt.embd, gpt.block, gpt.batch, gpt.vocab, flops/1e9, secs, tokens/secs, model/1e9, tokens/modelSecs)
			return nil
		},
	}
	// The default is read at run time: NumThreads logs an invalid
	// environment value, which must wait for main's log handler.
	cmd.Flags().IntVar(&threads, "threads", 0, "goroutines per SGEMM call (default: "+kernels.EnvNumThreads+" or GOMAXPROCS)")
	cmd.Flags().DurationVar(&minTime, "min-time", 300*time.Millisecond, "time spent on each case")
	cmd.Flags().StringVar(&precision, "precision", "fp32", "operands in fp32, bf16 (needs a bf16 kernel) or bf16-emulated (rounded, then fp32 SGEMM)")
	cmd.Flags().IntVar(&gpt.layers, "gpt-layers", gpt.layers, "the bounded GPT's transformer blocks (train gpt's --n-layer)")
	cmd.Flags().IntVar(&gpt.heads, "gpt-heads", gpt.heads, "the bounded GPT's attention heads (--n-head)")
	cmd.Flags().IntVar(&gpt.embd, "gpt-embd", gpt.embd, "the bounded GPT's width, a multiple of --gpt-heads (--n-embd)")
	cmd.Flags().IntVar(&gpt.block, "gpt-block", gpt.block, "the bounded GPT's context length (--block-size)")
	cmd.Flags().IntVar(&gpt.batch, "gpt-batch", gpt.batch, "the bounded GPT's windows per step (--batch-size)")
	cmd.Flags().IntVar(&gpt.vocab, "gpt-vocab", gpt.vocab, "the bounded GPT's vocabulary (256 for bytes)")
	return cmd
}

// check refuses a GPT shape that `gotrain train gpt` would not build.
func (g gptShape) check() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"gpt-layers", g.layers}, {"gpt-heads", g.heads}, {"gpt-embd", g.embd}, {"gpt-block", g.block}, {"gpt-batch", g.batch}, {"gpt-vocab", g.vocab}} {
		if err := checkAtLeast(f.name, f.v, 1); err != nil {
			return err
		}
	}
	if g.embd%g.heads != 0 {
		return badFlag("gpt-embd", g.embd, fmt.Sprintf("must be a multiple of --gpt-heads (%d)", g.heads))
	}
	return nil
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
