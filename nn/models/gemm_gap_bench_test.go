package models

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// gemmShape keys the GEMM calls of a step by shape and transposes.
type gemmShape struct {
	transA, transB bool
	m, n, k        int
}

func (s gemmShape) flops() float64 { return 2 * float64(s.m) * float64(s.n) * float64(s.k) }

// gemmTally sums the calls and time of each GEMM shape an observer sees.
type gemmTally struct {
	mu    sync.Mutex
	calls map[gemmShape]int
	time  map[gemmShape]time.Duration
}

func (t *gemmTally) observe(c kernels.GemmCall) {
	s := gemmShape{c.TransA, c.TransB, c.M, c.N, c.K}
	t.mu.Lock()
	t.calls[s]++
	t.time[s] += c.Elapsed
	t.mu.Unlock()
}

// isolatedGemmSeconds returns the time of reps back-to-back calls of
// shape s on warm operands of its own, as `gotrain bench gemm` times it.
func isolatedGemmSeconds(s gemmShape, reps int) float64 {
	rng := tensor.NewRNG(7)
	fill := func(n int) []float32 {
		x := tensor.Rand(rng, n)
		return x.Data()
	}
	a, b, c := fill(s.m*s.k), fill(s.k*s.n), fill(s.m*s.n)
	lda, ldb := s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	kernels.Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, b, ldb, 0, c, s.n)
	t0 := time.Now()
	for range reps {
		kernels.Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, b, ldb, 0, c, s.n)
	}
	return time.Since(t0).Seconds()
}

// BenchmarkGPTStepGemmGap attributes the default GPT training step's GEMM
// time (BenchmarkGPTTrainStep's model part: forward, loss, backward) to
// its shapes and sets each against the same shape timed alone in the same
// process, interleaved with the steps so that load on a shared machine
// hits both. It logs one line per shape (calls per step, in-step and
// isolated GFLOP/s, their ratio, share of the step's GEMM time) and
// reports the step's GEMM time against its isolated-rate bound.
// GOTRAIN_NUM_THREADS sets the threads; run with -v to see the lines.
func BenchmarkGPTStepGemmGap(b *testing.B) {
	const batch = gptBenchBatchSize
	m, cfg, ids, targets, _ := gptBenchBatch()
	params := nn.Parameters(m)
	step := func() {
		for _, p := range params {
			p.ZeroGrad()
		}
		logits, loss := m.Loss(ids, targets, batch, cfg.BlockSize)
		tensor.Recycle(logits)
		if err := loss.Backward(); err != nil {
			b.Fatal(err)
		}
	}
	step()
	tally := &gemmTally{calls: map[gemmShape]int{}, time: map[gemmShape]time.Duration{}}
	isolated := map[gemmShape]float64{}
	steps := 0
	var stepTime time.Duration
	b.ResetTimer()
	for b.Loop() {
		prev := kernels.SetGemmObserver(tally.observe)
		t0 := time.Now()
		step()
		stepTime += time.Since(t0)
		kernels.SetGemmObserver(prev)
		steps++
		// Each shape alone as often as the step calls it, so that both
		// sides see the same share of the machine's other load.
		for s, calls := range tally.calls {
			isolated[s] += isolatedGemmSeconds(s, calls/steps)
		}
	}
	b.StopTimer()
	shapes := make([]gemmShape, 0, len(tally.calls))
	var inStep, bound float64
	for s := range tally.calls {
		shapes = append(shapes, s)
		inStep += tally.time[s].Seconds()
		bound += isolated[s]
	}
	slices.SortFunc(shapes, func(x, y gemmShape) int { return cmp.Compare(tally.time[y], tally.time[x]) })
	var sb strings.Builder
	fmt.Fprintf(&sb, "threads=%d steps=%d step_ms=%.1f gemm_ms=%.1f bound_ms=%.1f\n", kernels.NumThreads(), steps,
		stepTime.Seconds()*1e3/float64(steps), inStep*1e3/float64(steps), bound*1e3/float64(steps))
	for _, s := range shapes {
		calls := tally.calls[s]
		in := float64(calls) * s.flops() / tally.time[s].Seconds() / 1e9
		iso := float64(calls) * s.flops() / isolated[s] / 1e9
		fmt.Fprintf(&sb, "m=%d n=%d k=%d trans=%s calls/step=%d instep_gflops=%.1f isolated_gflops=%.1f ratio=%.2f share=%.3f\n",
			s.m, s.n, s.k, transLetters(s), calls/steps, in, iso, in/iso, tally.time[s].Seconds()/inStep)
	}
	b.Log("\n" + sb.String())
	b.ReportMetric(bound/inStep, "bound/instep")
	b.ReportMetric(inStep/stepTime.Seconds(), "gemm-share")
}

func transLetters(s gemmShape) string {
	l := []byte("NN")
	if s.transA {
		l[0] = 'T'
	}
	if s.transB {
		l[1] = 'T'
	}
	return string(l)
}
