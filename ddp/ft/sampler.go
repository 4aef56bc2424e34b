package ft

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
)

// Sampler divides a dataset into a step-indexed global order: step s
// consumes global batch s (GlobalBatch indices) split across the members
// of the quorum present at s. Because a Manager's step advances only on
// commit, a discarded step's batch is consumed again, whole, by the next
// quorum.
type Sampler struct {
	N           int    // dataset size
	GlobalBatch int    // samples per step, across all replicas
	Shuffle     bool   // permute each epoch (by Seed and the epoch)
	Seed        uint64 // the shuffle's seed
}

// StepsPerEpoch returns the number of whole global batches in an epoch;
// the N mod GlobalBatch samples left over are dropped, as drop_last does.
func (s Sampler) StepsPerEpoch() int {
	if s.GlobalBatch <= 0 {
		return 0
	}
	return s.N / s.GlobalBatch
}

// Indices returns the dataset indices member rank of size consumes at
// step: a contiguous share of the step's global batch (the first
// GlobalBatch mod size members take one more).
func (s Sampler) Indices(step int64, rank, size int) ([]int, error) {
	spe := s.StepsPerEpoch()
	switch {
	case spe == 0:
		return nil, fmt.Errorf("ft: sampler: %d samples hold no global batch of %d", s.N, s.GlobalBatch)
	case step < 0:
		return nil, fmt.Errorf("ft: sampler: step %d is negative", step)
	case size <= 0 || rank < 0 || rank >= size:
		return nil, fmt.Errorf("ft: sampler: rank %d of %d members", rank, size)
	case size > s.GlobalBatch:
		return nil, fmt.Errorf("ft: sampler: %d members share a global batch of %d samples", size, s.GlobalBatch)
	}
	epoch := step / int64(spe)
	pos := int(step % int64(spe))
	order := make([]int, s.N)
	for i := range order {
		order[i] = i
	}
	if s.Shuffle {
		r := rand.New(rand.NewPCG(s.Seed, uint64(epoch)))
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	batch := order[pos*s.GlobalBatch : (pos+1)*s.GlobalBatch]
	lo, hi := share(s.GlobalBatch, rank, size)
	return batch[lo:hi], nil
}

// share returns the bounds of member rank's part of n items over size
// members.
func share(n, rank, size int) (lo, hi int) {
	q, r := n/size, n%size
	lo = rank*q + min(rank, r)
	hi = lo + q
	if rank < r {
		hi++
	}
	return lo, hi
}

// ShapeHash identifies a model by its parameters' shapes and any extra
// configuration strings that replicas must agree on (Config.ModelHash).
func ShapeHash(shapes [][]int, extra ...string) string {
	h := sha256.New()
	for _, s := range shapes {
		fmt.Fprintf(h, "%v;", s)
	}
	for _, e := range extra {
		fmt.Fprintf(h, "%q;", e)
	}
	return hex.EncodeToString(h.Sum(nil))
}
