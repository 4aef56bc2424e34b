package main

import (
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

func init() {
	var threads int
	var minTime time.Duration
	cmd := &cobra.Command{
		Use:   "gemm",
		Short: "Measure SGEMM GFLOP/s at the square, MLP and CNN shapes",
		Long: `Measure kernels.Sgemm at 512³, 1024³ and the GEMM shapes of the MNIST MLP
and CNN, printing one line per case. Each case runs for --min-time split into
repeated batches; the best batch is reported, which is the robust figure on a
shared, noisy machine.`,
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
			prev := kernels.SetNumThreads(threads)
			defer kernels.SetNumThreads(prev)
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			for _, c := range gemmCases {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("bench gemm: %w", err)
				}
				gf := benchGemmCase(c, minTime)
				fmt.Fprintf(out, "m=%d n=%d k=%d trans=%s gflops=%.1f\n", c.m, c.n, c.k, transName(c.transA, c.transB), gf)
			}
			return nil
		},
	}
	// The default is read at run time: NumThreads logs an invalid
	// environment value, which must wait for main's log handler.
	cmd.Flags().IntVar(&threads, "threads", 0, "goroutines per SGEMM call (default: "+kernels.EnvNumThreads+" or GOMAXPROCS)")
	cmd.Flags().DurationVar(&minTime, "min-time", 300*time.Millisecond, "time spent on each case")
	benchCmd.AddCommand(cmd)
}

// benchGemmCase returns the best GFLOP/s over batches of about 5 ms.
func benchGemmCase(c gemmCase, minTime time.Duration) float64 {
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
	run := func() {
		kernels.Sgemm(c.transA, c.transB, c.m, c.n, c.k, 1, a, lda, b, ldb, 0, out, c.n)
	}
	run() // warm caches and packing buffers
	flops := 2 * float64(c.m) * float64(c.n) * float64(c.k)
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
