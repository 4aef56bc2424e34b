package tensor

import (
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

func BenchmarkExpf(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = -float32(i%1000) / 100
	}
	var s float32
	for b.Loop() {
		for _, v := range x {
			s += expf(v)
		}
	}
	sink = s
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/elem")
}

func BenchmarkErff(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i%1000)/200 - 2.5
	}
	var s float32
	for b.Loop() {
		for _, v := range x {
			s += erff(v)
		}
	}
	sink = s
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/elem")
}

var sink float32

func BenchmarkGELU(b *testing.B) {
	x := randT(NewRNG(1), -4, 4, 1<<16)
	x.SetRequiresGrad(true)
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	g := Full(1, x.Len())
	cpu0 := processCPUTime()
	for b.Loop() {
		if err := GELU(x).BackwardWith(g); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPUTime()-cpu0).Nanoseconds())/float64(b.N*x.Len()), "cpu-ns/elem")
}
