package tensor

import (
	"math"
	"testing"
)

// TestBatchNormStatsFarFromZero checks BatchNorm's one-pass batch
// statistics against two-pass float64 ones on channels whose mean is
// thousands of standard deviations from zero, where Σx² − (Σx)²/m would
// lose the variance: the running statistics, with momentum 1, are the
// batch mean and the unbiased variance.
func TestBatchNormStatsFarFromZero(t *testing.T) {
	rng := NewRNG(17)
	n, c, s := 5, 3, 37
	x := randT(rng, -0.5, 0.5, n, c, s)
	offsets := []float32{3e5, -700, 0.25}
	for i := 0; i < n; i++ {
		for ch := 0; ch < c; ch++ {
			for j := 0; j < s; j++ {
				x.data[(i*c+ch)*s+j] += offsets[ch]
			}
		}
	}
	rm, rv := Zeros(c), Zeros(c)
	BatchNorm(x, nil, nil, rm, rv, true, 1, 1e-5)
	m := float64(n * s)
	for ch := 0; ch < c; ch++ {
		var sum, sq float64
		for i := 0; i < n; i++ {
			for j := 0; j < s; j++ {
				sum += float64(x.data[(i*c+ch)*s+j])
			}
		}
		mu := sum / m
		for i := 0; i < n; i++ {
			for j := 0; j < s; j++ {
				d := float64(x.data[(i*c+ch)*s+j]) - mu
				sq += d * d
			}
		}
		if got := float64(rm.data[ch]); math.Abs(got-mu) > 1e-6*math.Abs(mu)+1e-7 {
			t.Errorf("channel %d: mean %v, want %v", ch, got, mu)
		}
		if got, want := float64(rv.data[ch]), sq/(m-1); math.Abs(got-want) > 1e-6*want {
			t.Errorf("channel %d: variance %v, want %v", ch, got, want)
		}
	}
}
