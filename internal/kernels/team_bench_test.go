package kernels

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSgemmThreadScaling times the MNIST MLP's GEMMs (batch 64) at
// one thread and at two, alternating, and reports the two-thread speed-up:
// each thread's share is 150–250 µs, so the cost of handing it over shows.
func BenchmarkSgemmThreadScaling(b *testing.B) {
	shapes := []benchShape{
		{64, 512, 784, false, true},
		{64, 512, 512, false, true},
		{64, 512, 512, false, false},
		{512, 512, 64, true, false},
		{512, 784, 64, true, false},
	}
	for _, s := range shapes {
		b.Run(fmt.Sprintf("m=%d,n=%d,k=%d,t=%s", s.m, s.n, s.k, transName(s.transA, s.transB)), func(b *testing.B) {
			a, lda, bb, ldb, c := s.operands()
			var d [2]time.Duration
			run := func(t int) {
				t0 := time.Now()
				sgemmWith(gemm, t, s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, nil, c, s.n)
				d[t-1] += time.Since(t0)
			}
			run(1)
			run(2)
			d = [2]time.Duration{}
			i := 0
			for b.Loop() {
				if i%2 == 0 {
					run(1)
					run(2)
				} else {
					run(2)
					run(1)
				}
				i++
			}
			b.ReportMetric(d[0].Seconds()/d[1].Seconds(), "scaling")
			b.ReportMetric(float64(2*s.m*s.n*s.k)*float64(i)/d[0].Seconds()/1e9, "gflops-1t")
			b.ReportMetric(d[0].Seconds()*1e6/float64(i), "us-1t")
		})
	}
}

// BenchmarkParallelHandoff reports how long a helper takes to start on
// the other CPU while the caller keeps running, for a Parallel region
// (team) and for a fresh goroutine, the CPUs left idle for a while
// between regions as between a training step's parallel regions.
func BenchmarkParallelHandoff(b *testing.B) {
	idle := func() { // the caller computes alone for a while
		t0 := time.Now()
		for time.Since(t0) < 300*time.Microsecond {
		}
	}
	measure := func(b *testing.B, start func(f func())) {
		var total time.Duration
		n := 0
		for b.Loop() {
			idle()
			var began atomic.Int64
			t0 := time.Now()
			start(func() { began.Store(int64(time.Since(t0)) + 1) })
			n++
			total += time.Duration(began.Load())
		}
		b.ReportMetric(total.Seconds()*1e6/float64(n), "us-to-start")
	}
	b.Run("team", func(b *testing.B) {
		measure(b, func(f func()) {
			var started atomic.Bool
			Parallel(2, func(i int) {
				if i == 1 {
					f()
					started.Store(true)
					return
				}
				for !started.Load() { // the caller busy until the helper runs
				}
			})
		})
	})
	b.Run("goroutine", func(b *testing.B) {
		measure(b, func(f func()) {
			var started atomic.Bool
			var wg sync.WaitGroup
			wg.Go(func() {
				f()
				started.Store(true)
			})
			for !started.Load() {
			}
			wg.Wait()
		})
	})
}
