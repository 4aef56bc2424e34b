package nn

import (
	"slices"
	"sync"
	"testing"
)

// Builds under Seeded that run at the same time, as the ranks of a job run
// as goroutines do, each get the weights a build alone gets.
func TestSeededBuildsConcurrently(t *testing.T) {
	build := func() *SequentialLayer {
		return Sequential(Linear(64, 48), ReLU(), Linear(48, 32), Dropout(0.1), Linear(32, 10))
	}
	weights := func(m *SequentialLayer) [][]float32 {
		var w [][]float32
		for _, p := range Parameters(m) {
			w = append(w, slices.Clone(p.Data()))
		}
		return w
	}
	var alone *SequentialLayer
	Seeded(7, func() { alone = build() })
	want := weights(alone)

	const builders = 6
	got := make([][][]float32, builders)
	var wg sync.WaitGroup
	for i := range builders {
		wg.Go(func() {
			var m *SequentialLayer
			Seeded(7, func() { m = build() })
			got[i] = weights(m)
		})
	}
	wg.Wait()
	for i, w := range got {
		for j := range want {
			if !slices.Equal(w[j], want[j]) {
				t.Fatalf("builder %d: parameter %d differs from the build alone", i, j)
			}
		}
	}
}
