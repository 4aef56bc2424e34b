package data

import "fmt"

// DistributedSampler restricts each data-parallel replica (rank) to its
// own shard of a dataset, with the semantics of PyTorch's
// torch.utils.data.distributed.DistributedSampler:
//
//   - numSamples = ceil((n-replicas)/replicas) if drop-last is set and
//     replicas does not divide n, else ceil(n/replicas); every rank gets
//     exactly numSamples indices, so the ranks stay in step;
//   - the epoch's list is a permutation of 0…n-1 seeded by seed+epoch when
//     shuffling, else 0…n-1;
//   - without drop-last the list is padded to numSamples·replicas by
//     repeating it from the start; with drop-last it is truncated;
//   - rank r takes list[r : numSamples·replicas : replicas].
//
// The one difference: the permutation is this package's own (PCG-DXSM and
// Fisher–Yates, see NewRandomSampler), not torch.randperm's. It is
// identical on every rank and machine for the same seed and epoch.
//
// The shuffled order is that of NewRandomSampler(n, seed) for the same
// epoch, so with replicas dividing n, step k's batches of size B on all
// ranks together hold exactly batch k of size replicas·B of a single
// process using a RandomSampler: data-parallel training sees the same
// samples per step as single-process training with the larger batch.
//
// Call SetEpoch at the start of every epoch, as in PyTorch; otherwise every
// epoch repeats the same order.
type DistributedSampler struct {
	position
	n, replicas, rank int
	numSamples        int
	cfg               config
	// perm is scratch for the epoch's permutation, kept between epochs.
	perm []int
}

// NewDistributedSampler returns the sampler of rank among numReplicas over
// a dataset of n examples. Options: Shuffle (default true), Seed (default
// 0), DropLast (default false). It panics, naming them, on arguments that
// cannot describe a world (n < 0, numReplicas <= 0, rank outside
// [0, numReplicas)), which a process group's Size and Rank never are, and
// on an option that is not one of these.
func NewDistributedSampler(n, numReplicas, rank int, opts ...Option) *DistributedSampler {
	switch {
	case n < 0:
		panic(fmt.Sprintf("data: NewDistributedSampler: dataset size %d is negative", n))
	case numReplicas <= 0:
		panic(fmt.Sprintf("data: NewDistributedSampler: numReplicas %d must be positive", numReplicas))
	case rank < 0 || rank >= numReplicas:
		panic(fmt.Sprintf("data: NewDistributedSampler: rank %d outside [0, %d)", rank, numReplicas))
	}
	cfg := config{shuffle: true}.apply("NewDistributedSampler", opts, "Shuffle", "Seed", "DropLast")
	return &DistributedSampler{
		n: n, replicas: numReplicas, rank: rank, cfg: cfg,
		numSamples: distributedNumSamples(n, numReplicas, cfg.dropLast),
	}
}

// distributedNumSamples is PyTorch's num_samples.
func distributedNumSamples(n, replicas int, dropLast bool) int {
	if dropLast && n%replicas != 0 {
		return ceilDiv(n-replicas, replicas)
	}
	return ceilDiv(n, replicas)
}

// ceilDiv is math.ceil(a/b) for b > 0 and any a, as Python computes it.
func ceilDiv(a, b int) int {
	if a <= 0 {
		return -(-a / b)
	}
	return (a + b - 1) / b
}

// Len returns the number of indices this rank visits per epoch
// (PyTorch's num_samples).
func (s *DistributedSampler) Len() int { return s.numSamples }

// TotalSize returns the number of indices all ranks visit per epoch
// together: Len()·replicas.
func (s *DistributedSampler) TotalSize() int { return s.numSamples * s.replicas }

// SetEpoch selects the epoch of the next pass; the shuffled order depends
// on seed+epoch. Every rank must set the same epoch.
func (s *DistributedSampler) SetEpoch(epoch int) { s.setEpoch(epoch) }

// Epoch returns the epoch of the next or current pass.
func (s *DistributedSampler) Epoch() int { return s.epoch }

// Advance implements ResumableSampler.
func (s *DistributedSampler) Advance(n int) { s.advance(n) }

// AppendIndices implements Sampler: it appends this rank's indices of the
// current epoch, after any restored position.
func (s *DistributedSampler) AppendIndices(dst []int) []int {
	skip := s.startPass()
	if s.numSamples == 0 {
		return dst
	}
	var base []int
	if s.cfg.shuffle {
		s.perm = appendPermutation(s.perm[:0], s.n, s.cfg.seed+uint64(s.epoch))
		base = s.perm
	}
	return appendShard(dst, base, s.n, s.replicas, s.rank, s.numSamples, skip)
}

// appendShard appends positions skip…numSamples-1 of rank's shard of the
// epoch's list base (nil for 0…n-1), padded or truncated to
// numSamples·replicas. Padding repeats the list from its start and
// truncation keeps a prefix, so position j of that list is base[j % n].
func appendShard(dst, base []int, n, replicas, rank, numSamples, skip int) []int {
	for k := skip; k < numSamples; k++ {
		j := (rank + k*replicas) % n
		if base != nil {
			j = base[j]
		}
		dst = append(dst, j)
	}
	return dst
}

// State implements ResumableSampler.
func (s *DistributedSampler) State() SamplerState {
	return SamplerState{Epoch: s.epoch, Seen: s.seen, Replicas: s.replicas}
}

// Restore implements ResumableSampler. A state saved with a different
// number of replicas is converted: the samples all ranks had seen together
// form a prefix of the epoch's list, and every rank now skips the number of
// whole rounds of that prefix, so ranks skip alike and no unseen sample is
// skipped.
func (s *DistributedSampler) Restore(st SamplerState) error {
	if st.Replicas == 0 || st.Replicas == s.replicas {
		return s.restore(st, s.numSamples)
	}
	if st.Replicas < 0 {
		return fmt.Errorf("%w: replicas %d is negative", ErrInvalidState, st.Replicas)
	}
	oldLen := distributedNumSamples(s.n, st.Replicas, s.cfg.dropLast)
	if st.Epoch < 0 || st.Seen < 0 || st.Seen > oldLen {
		return fmt.Errorf("%w: epoch %d, seen %d with %d replicas (want epoch >= 0 and seen in [0, %d])",
			ErrInvalidState, st.Epoch, st.Seen, st.Replicas, oldLen)
	}
	seen := min(st.Seen*st.Replicas/s.replicas, s.numSamples)
	return s.restore(SamplerState{Epoch: st.Epoch, Seen: seen}, s.numSamples)
}
