package optim

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestFusedMatchesGeneric compares every fused implementation this CPU
// runs (the assembly ones) with the Go reference loops, for lengths around
// the vector widths, and checks nothing past the end is touched.
func TestFusedMatchesGeneric(t *testing.T) {
	if len(fusedImpls) == 1 {
		t.Log("no assembly on this CPU or build: comparing the reference with itself")
	}
	for _, impl := range fusedImpls {
		t.Run(impl.name, func(t *testing.T) { testFused(t, impl) })
	}
	if best := fusedImpls[len(fusedImpls)-1]; reflect.ValueOf(adamFused).Pointer() != reflect.ValueOf(best.adam).Pointer() {
		t.Errorf("Adam does not use the best implementation, %s", best.name)
	}
}

func testFused(t *testing.T, impl fusedImpl) {
	const guard = 17
	rng := rand.New(rand.NewPCG(11, 12))
	lengths := []int{0, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1001}
	// fill returns n random values followed by guard sentinels.
	fill := func(n int, positive bool) []float32 {
		x := make([]float32, n+guard)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			if positive {
				x[i] = float32(rng.Float64())
			}
		}
		for i := n; i < len(x); i++ {
			x[i] = 12345
		}
		return x
	}
	check := func(t *testing.T, what string, n int, got, want []float32) {
		t.Helper()
		for i := range got {
			if i >= n {
				if got[i] != 12345 {
					t.Fatalf("%s n=%d: element %d past the end changed to %v", what, n, i, got[i])
				}
				continue
			}
			if d := math.Abs(float64(got[i] - want[i])); d > 4e-7*math.Max(math.Abs(float64(want[i])), 1) {
				t.Fatalf("%s n=%d [%d]: fused %v, reference %v", what, n, i, got[i], want[i])
			}
		}
	}
	clone := func(x []float32) []float32 { return append([]float32(nil), x...) }
	for _, n := range lengths {
		p, g, m, v := fill(n, false), fill(n, false), fill(n, false), fill(n, true)
		k := adamConsts{decay: 0.999, sign: -1, wd: 0.01, b1: 0.9, c1: 0.1, b2: 0.999, c2: 0.001, invBC2: 3.2, eps: 1e-8, stepSize: 0.01}
		p2, m2, v2 := clone(p), clone(m), clone(v)
		impl.adam(p[:n], g[:n], m[:n], v[:n], &k)
		adamFusedGeneric(p2[:n], g[:n], m2[:n], v2[:n], &k)
		check(t, "adam p", n, p, p2)
		check(t, "adam m", n, m, m2)
		check(t, "adam v", n, v, v2)

		p, g, sq, acc := fill(n, false), fill(n, false), fill(n, true), fill(n, true)
		kd := adadeltaConsts{sign: 1, wd: 0.05, rho: 0.9, c: 0.1, eps: 1e-6, lr: 1}
		p2, sq2, acc2 := clone(p), clone(sq), clone(acc)
		impl.adadelta(p[:n], g[:n], sq[:n], acc[:n], &kd)
		adadeltaFusedGeneric(p2[:n], g[:n], sq2[:n], acc2[:n], &kd)
		check(t, "adadelta p", n, p, p2)
		check(t, "adadelta sq", n, sq, sq2)
		check(t, "adadelta acc", n, acc, acc2)
	}
}
