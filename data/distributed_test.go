package data

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// torchReference is PyTorch's DistributedSampler.__iter__ and __init__,
// transcribed formula by formula, over a given epoch list base (nil means
// range(n)). It returns num_samples and the shard of every rank.
func torchReference(n, replicas int, dropLast bool, base []int) (int, [][]int) {
	var numSamples int
	if dropLast && n%replicas != 0 {
		numSamples = int(math.Ceil(float64(n-replicas) / float64(replicas)))
	} else {
		numSamples = int(math.Ceil(float64(n) / float64(replicas)))
	}
	totalSize := numSamples * replicas
	indices := slices.Clone(base)
	if indices == nil {
		indices = make([]int, n)
		for i := range indices {
			indices[i] = i
		}
	}
	if !dropLast {
		paddingSize := totalSize - len(indices)
		if paddingSize <= len(indices) {
			indices = append(indices, indices[:paddingSize]...)
		} else {
			var repeated []int
			for range int(math.Ceil(float64(paddingSize) / float64(len(indices)))) {
				repeated = append(repeated, indices...)
			}
			indices = append(indices, repeated[:paddingSize]...)
		}
	} else {
		indices = indices[:totalSize]
	}
	if len(indices) != totalSize {
		panic("reference: wrong total size")
	}
	shards := make([][]int, replicas)
	for rank := range replicas {
		shards[rank] = []int{}
		for j := rank; j < totalSize; j += replicas {
			shards[rank] = append(shards[rank], indices[j])
		}
	}
	return numSamples, shards
}

func mustSampler(t testing.TB, n, replicas, rank int, opts ...Option) *DistributedSampler {
	t.Helper()
	return NewDistributedSampler(n, replicas, rank, opts...)
}

// TestDistributedSamplerMatchesTorch checks the shards against those
// PyTorch 1.13 produced (testdata/gen_torch_sampler.py). For shuffled
// cases, the shard rule is applied to torch's own permutation, since ours
// differs by design.
func TestDistributedSamplerMatchesTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_distributed_sampler.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct {
		Cases []struct {
			N, Replicas, Seed, Epoch int
			DropLast                 bool `json:"drop_last"`
			Shuffle                  bool
			NumSamples               int `json:"num_samples"`
			TotalSize                int `json:"total_size"`
			Perm                     []int
			Shards                   [][]int
		}
	}
	if err := json.Unmarshal(raw, &fixture); err != nil {
		t.Fatal(err)
	}
	if len(fixture.Cases) < 200 {
		t.Fatalf("fixture has only %d cases", len(fixture.Cases))
	}
	for _, c := range fixture.Cases {
		for rank := range c.Replicas {
			s := mustSampler(t, c.N, c.Replicas, rank, DropLast(c.DropLast), Shuffle(c.Shuffle), Seed(uint64(c.Seed)))
			s.SetEpoch(c.Epoch)
			if s.Len() != c.NumSamples || s.TotalSize() != c.TotalSize {
				t.Fatalf("%+v: Len %d TotalSize %d, torch %d %d", c, s.Len(), s.TotalSize(), c.NumSamples, c.TotalSize)
			}
			var got []int
			if c.Shuffle {
				got = appendShard([]int{}, c.Perm, c.N, c.Replicas, rank, s.Len(), 0)
			} else {
				got = s.AppendIndices([]int{})
			}
			if !slices.Equal(got, c.Shards[rank]) {
				t.Fatalf("n=%d replicas=%d rank=%d drop_last=%v shuffle=%v: got %v, torch %v",
					c.N, c.Replicas, rank, c.DropLast, c.Shuffle, got, c.Shards[rank])
			}
		}
	}
}

// TestDistributedSamplerMatchesReference checks every size, world size,
// rank, option and a few epochs against the transcribed PyTorch formulas.
func TestDistributedSamplerMatchesReference(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, 1001, 60000} {
		for replicas := 1; replicas <= 7; replicas++ {
			for _, dropLast := range []bool{false, true} {
				for _, shuffle := range []bool{false, true} {
					epochs := []int{0, 1, 2}
					if n == 60000 && replicas > 3 {
						epochs = []int{1}
					}
					for _, epoch := range epochs {
						checkAgainstReference(t, n, replicas, dropLast, shuffle, 42, epoch)
					}
				}
			}
		}
	}
}

func checkAgainstReference(t *testing.T, n, replicas int, dropLast, shuffle bool, seed uint64, epoch int) {
	t.Helper()
	name := fmt.Sprintf("n=%d replicas=%d drop_last=%v shuffle=%v epoch=%d", n, replicas, dropLast, shuffle, epoch)
	var base []int
	if shuffle {
		base = appendPermutation(nil, n, seed+uint64(epoch))
	}
	wantLen, want := torchReference(n, replicas, dropLast, base)
	seen := make([]int, n)
	for rank := range replicas {
		s := mustSampler(t, n, replicas, rank, DropLast(dropLast), Shuffle(shuffle), Seed(seed))
		s.SetEpoch(epoch)
		got := s.AppendIndices(nil)
		if s.Len() != wantLen || len(got) != wantLen {
			t.Fatalf("%s rank %d: Len %d, %d indices, want %d", name, rank, s.Len(), len(got), wantLen)
		}
		if !slices.Equal(got, want[rank]) {
			t.Fatalf("%s rank %d: shard differs from the reference", name, rank)
		}
		for _, i := range got {
			seen[i]++
		}
	}
	total := wantLen * replicas
	for i, c := range seen {
		switch {
		case !dropLast && c == 0:
			t.Fatalf("%s: index %d not covered", name, i)
		case dropLast && c > 1:
			t.Fatalf("%s: index %d visited %d times with drop_last", name, i, c)
		case total <= n && c > 1:
			t.Fatalf("%s: index %d visited %d times though no padding was needed", name, i, c)
		}
	}
}

func TestDistributedSamplerKnownShards(t *testing.T) {
	// PyTorch: DistributedSampler(range(10), 3, r, shuffle=False).
	for rank, want := range [][]int{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}} {
		got := mustSampler(t, 10, 3, rank, Shuffle(false)).AppendIndices(nil)
		if !slices.Equal(got, want) {
			t.Errorf("rank %d: %v, want %v", rank, got, want)
		}
	}
	for rank, want := range [][]int{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}} {
		got := mustSampler(t, 10, 3, rank, Shuffle(false), DropLast(true)).AppendIndices(nil)
		if !slices.Equal(got, want) {
			t.Errorf("drop_last rank %d: %v, want %v", rank, got, want)
		}
	}
}

func TestDistributedSamplerSamePermutationOnEveryRank(t *testing.T) {
	const n, replicas = 1000, 4
	global := func(epoch int, seed uint64) []int {
		out := make([]int, n)
		for rank := range replicas {
			s := mustSampler(t, n, replicas, rank, Seed(seed))
			s.SetEpoch(epoch)
			for k, i := range s.AppendIndices(nil) {
				out[rank+k*replicas] = i
			}
		}
		return out
	}
	e0 := global(0, 7)
	if !slices.Equal(e0, appendPermutation(nil, n, 7)) {
		t.Fatal("interleaved shards are not the seed+epoch permutation")
	}
	if !slices.Equal(global(0, 7), e0) {
		t.Fatal("same seed and epoch gave a different order")
	}
	if slices.Equal(global(1, 7), e0) {
		t.Fatal("SetEpoch did not change the order")
	}
	if !slices.Equal(global(1, 6), global(0, 7)) {
		t.Fatal("order does not depend on seed+epoch alone")
	}
	if slices.Equal(global(0, 8), e0) {
		t.Fatal("Seed did not change the order")
	}
}

func TestDistributedSamplerBadArguments(t *testing.T) {
	for _, c := range []struct {
		n, replicas, rank int
		mention           string
	}{
		{-1, 2, 0, "dataset size -1"},
		{10, 0, 0, "numReplicas 0"},
		{10, -3, 0, "numReplicas -3"},
		{10, 2, 2, "rank 2 outside [0, 2)"},
		{10, 2, -1, "rank -1 outside [0, 2)"},
	} {
		func() {
			defer func() {
				r, _ := recover().(string)
				if !strings.HasPrefix(r, "data: NewDistributedSampler: ") {
					t.Fatalf("%+v: recovered %q, want a data: NewDistributedSampler: panic", c, r)
				}
				if !strings.Contains(r, c.mention) {
					t.Errorf("%+v: panic %q does not mention %q", c, r, c.mention)
				}
			}()
			NewDistributedSampler(c.n, c.replicas, c.rank)
		}()
	}
}

func TestPermutationGolden(t *testing.T) {
	// Checkpoints resume by recomputing the epoch's order, so it must never
	// change between releases. Update only with a documented break.
	got := appendPermutation(nil, 12, 0)
	want := []int{10, 1, 0, 6, 3, 8, 2, 11, 4, 9, 7, 5}
	if !slices.Equal(got, want) {
		t.Fatalf("permutation of 12 with seed 0 is %v, want %v", got, want)
	}
	for _, n := range []int{0, 1, 2, 3, 1001} {
		p := appendPermutation(nil, n, 3)
		slices.Sort(p)
		for i, v := range p {
			if v != i {
				t.Fatalf("n=%d: not a permutation", n)
			}
		}
	}
}

// TestPermutationUniform checks that each of the 6 orders of 3 elements is
// about equally likely over 60000 seeds (chi-square, 5 degrees of freedom,
// threshold at p ≈ 1e-6 so a correct shuffle essentially never fails).
func TestPermutationUniform(t *testing.T) {
	counts := map[[3]int]int{}
	const trials = 60000
	for seed := range uint64(trials) {
		p := appendPermutation(nil, 3, seed)
		counts[[3]int{p[0], p[1], p[2]}]++
	}
	if len(counts) != 6 {
		t.Fatalf("saw %d distinct orders, want 6", len(counts))
	}
	chi2 := 0.0
	for _, c := range counts {
		d := float64(c) - trials/6.0
		chi2 += d * d / (trials / 6.0)
	}
	if chi2 > 35 {
		t.Fatalf("chi-square %.1f: permutations not uniform: %v", chi2, counts)
	}
}

// TestDistributedStepsMatchSingleProcess checks the property DDP
// equivalence tests rely on: per step, the ranks' batches together are the
// single process's batch of replicas× the size.
func TestDistributedStepsMatchSingleProcess(t *testing.T) {
	const n, batch, seed, epoch = 1000, 32, 3, 1
	ds := indexDataset(n)
	for _, replicas := range []int{1, 2, 4, 5} {
		single := NewRandomSampler(n, seed)
		single.SetEpoch(epoch)
		var want [][]int
		for b := range NewLoader(ds, batch*replicas, single).Batches() {
			want = append(want, slices.Sorted(slices.Values(b.Indices)))
		}
		got := make([][]int, len(want))
		for rank := range replicas {
			s := mustSampler(t, n, replicas, rank, Seed(seed))
			s.SetEpoch(epoch)
			k := 0
			for b := range NewLoader(ds, batch, s).Batches() {
				got[k] = append(got[k], b.Indices...)
				k++
			}
		}
		for k := range want {
			if slices.Sort(got[k]); !slices.Equal(got[k], want[k]) {
				t.Fatalf("replicas %d step %d: ranks' batches %v, single process %v", replicas, k, got[k], want[k])
			}
		}
	}
}
