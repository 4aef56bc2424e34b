package tensor

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/kernels"
)

// resnetConvShapes are ResNet-18's convolutions at CIFAR size (32×32
// input, the CIFAR stem): channels, input side, kernel side and stride.
var resnetConvShapes = []struct{ c, o, hw, k, s int }{
	{64, 64, 32, 3, 1},
	{128, 128, 16, 3, 1},
	{256, 256, 8, 3, 1},
	{512, 512, 4, 3, 1},
	{64, 128, 32, 3, 2},
	{128, 256, 16, 3, 2},
	{256, 512, 8, 3, 2},
}

// BenchmarkConvResNetLayers times ResNet-18's convolution shapes at batch
// GOTRAIN_BENCH_BATCH (default 64) on one thread, each pass on its own:
// the forward, the input gradient and the weight gradient (Backward with
// only that operand needing a gradient). Each pass runs as it does by
// default (Winograd for the stride-1 shapes) and on the direct products
// ("-direct"); the input gradient's direct form both as the transposed
// convolution ("dx-conv-direct", at every channel count) and as column
// gradients ("dx-colgrad"), alternately, for ratios on a shared machine:
// `go test ./tensor -run '^$' -bench ConvResNetLayers -benchtime 3x`.
// GFLOP/s counts the direct form's 2·N·O·C·kh·kw·oh·ow per pass, whatever
// the path.
func BenchmarkConvResNetLayers(b *testing.B) {
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	defer func(v bool) { inputGradAsConv = v }(inputGradAsConv)
	defer func(v bool) { winogradConv = v }(winogradConv)
	// The transposed convolution at every width, to compare.
	defer func(v int) { inputGradConvMinChannels = v }(inputGradConvMinChannels)
	inputGradConvMinChannels = 0
	n := benchConvBatch(b)
	rng := NewRNG(5)
	for round := range benchRounds {
		for _, sh := range resnetConvShapes {
			pad := sh.k / 2
			opt := ConvOptions{Stride: [2]int{sh.s, sh.s}, Padding: [2]int{pad, pad}, Dilation: [2]int{1, 1}, Groups: 1}
			x0 := randT(rng, -1, 1, n, sh.c, sh.hw, sh.hw)
			w0 := randT(rng, -0.05, 0.05, sh.o, sh.c, sh.k, sh.k)
			ohw := kernels.ConvOut(sh.hw, sh.k, sh.s, pad, 1)
			flops := 2 * float64(n*sh.o*sh.c*sh.k*sh.k*ohw*ohw)
			name := fmt.Sprintf("%dto%d_%dx%d_k%ds%d", sh.c, sh.o, sh.hw, sh.hw, sh.k, sh.s)
			passes := []struct {
				pass             string
				gx, gw, tc, wino bool
			}{
				{"forward", false, false, true, true},
				{"forward-direct", false, false, true, false},
				{"dx-conv", true, false, true, true},
				{"dx-conv-direct", true, false, true, false},
				{"dx-colgrad", true, false, false, false},
				{"dw", false, true, true, true},
				{"dw-direct", false, true, true, false},
			}
			for _, p := range passes {
				b.Run(fmt.Sprintf("%s/%s/%d", name, p.pass, round), func(b *testing.B) {
					inputGradAsConv, winogradConv = p.tc, p.wino
					x, w := x0.Detach().SetRequiresGrad(p.gx), w0.Detach().SetRequiresGrad(p.gw)
					// CPU time of the timed part only: steadier than wall
					// time when other processes share the cores.
					var cpu time.Duration
					for b.Loop() {
						if !p.gx && !p.gw {
							c0 := processCPUTime()
							Conv2dWith(x, w, nil, opt)
							cpu += processCPUTime() - c0
							continue
						}
						b.StopTimer()
						// A fresh gradient, as an op's input has in a network.
						x.ZeroGrad()
						w.ZeroGrad()
						loss := Sum(Conv2dWith(x, w, nil, opt), false)
						b.StartTimer()
						c0 := processCPUTime()
						if err := loss.Backward(); err != nil {
							b.Fatal(err)
						}
						cpu += processCPUTime() - c0
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					if cpu > 0 {
						b.ReportMetric(flops*float64(b.N)/cpu.Seconds()/1e9, "cpu-GFLOP/s")
					}
				})
			}
		}
	}
}

// benchConvBatch is BenchmarkConvResNetLayers' batch: GOTRAIN_BENCH_BATCH,
// else 64.
func benchConvBatch(b *testing.B) int {
	s := os.Getenv("GOTRAIN_BENCH_BATCH")
	if s == "" {
		return 64
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("GOTRAIN_BENCH_BATCH=%q: want a positive integer", s)
	}
	return n
}
