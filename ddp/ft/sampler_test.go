package ft

import (
	"slices"
	"testing"
)

// TestSamplerDividesEachStepAmongMembers checks that every step's global
// batch is split without overlap among whichever members are present,
// so that an epoch consumes each sample once however membership changes.
func TestSamplerDividesEachStepAmongMembers(t *testing.T) {
	s := Sampler{N: 50, GlobalBatch: 7, Shuffle: true, Seed: 3}
	sizes := []int{3, 3, 2, 2, 1, 3, 2} // quorum size at each step
	if s.StepsPerEpoch() != len(sizes) {
		t.Fatalf("StepsPerEpoch = %d; want %d", s.StepsPerEpoch(), len(sizes))
	}
	seen := map[int]int{}
	for step, size := range sizes {
		var whole []int
		for r := range size {
			idx, err := s.Indices(int64(step), r, size)
			if err != nil {
				t.Fatal(err)
			}
			whole = append(whole, idx...)
		}
		// The same batch whatever the quorum's size.
		var alone []int
		alone, _ = s.Indices(int64(step), 0, 1)
		if !slices.Equal(whole, alone) {
			t.Fatalf("step %d: %d members consume %v; one member %v", step, size, whole, alone)
		}
		for _, i := range whole {
			seen[i]++
		}
	}
	if len(seen) != 49 {
		t.Fatalf("epoch consumed %d distinct samples; want 49 (7 whole batches of 7)", len(seen))
	}
	for i, n := range seen {
		if n != 1 || i < 0 || i >= 50 {
			t.Fatalf("sample %d consumed %d times", i, n)
		}
	}
	// The next epoch is another permutation.
	e0, _ := s.Indices(0, 0, 1)
	e1, _ := s.Indices(7, 0, 1)
	if slices.Equal(e0, e1) {
		t.Fatalf("epochs 0 and 1 start with the same batch %v", e0)
	}
}

func TestSamplerRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		s          Sampler
		step       int64
		rank, size int
	}{
		{Sampler{N: 3, GlobalBatch: 4}, 0, 0, 1},
		{Sampler{N: 8, GlobalBatch: 4}, -1, 0, 1},
		{Sampler{N: 8, GlobalBatch: 4}, 0, 2, 2},
		{Sampler{N: 8, GlobalBatch: 2}, 0, 0, 3},
	} {
		if _, err := c.s.Indices(c.step, c.rank, c.size); err == nil {
			t.Errorf("%+v.Indices(%d, %d, %d) succeeded; want an error", c.s, c.step, c.rank, c.size)
		}
	}
}
