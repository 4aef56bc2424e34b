package tensor

import "testing"

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
