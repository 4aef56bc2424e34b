package data

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// ErrInvalidState is wrapped by Restore errors for a SamplerState that
// cannot belong to the sampler.
var ErrInvalidState = errors.New("data: invalid sampler state")

// Sampler orders the dataset indices of one epoch.
//
// A Loader calls AppendIndices once at the start of every pass over its
// Batches; the sampler decides which epoch that is (see SetEpoch on the
// samplers of this package). The samplers of this package are not safe for
// concurrent use: call their methods from the goroutine that ranges over
// the Loader.
type Sampler interface {
	// Len returns the number of indices in one full epoch.
	Len() int
	// AppendIndices begins a pass over the current epoch: it appends the
	// indices the pass visits, in order, to dst and returns the extended
	// slice. A resumable sampler restored mid-epoch leaves out the indices
	// already seen.
	AppendIndices(dst []int) []int
}

// ResumableSampler is a Sampler whose position within an epoch can be
// saved in a checkpoint and restored after a restart. All samplers of this
// package implement it.
type ResumableSampler interface {
	Sampler
	// Advance records that n more indices of the current pass reached the
	// training loop. The Loader calls it as it hands each batch to the loop
	// body, so State counts what the loop has seen, not what was prefetched.
	Advance(n int)
	// State returns the current epoch and position within it.
	State() SamplerState
	// Restore makes the next pass over epoch st.Epoch skip its first
	// st.Seen indices. It returns an error wrapping ErrInvalidState if st
	// cannot belong to this sampler.
	Restore(st SamplerState) error
}

// SamplerState is a sampler's position: the epoch and how many of this
// rank's indices of that epoch the training loop has seen. Save it with the
// model; after a restart, Restore it, then run the epoch loop from
// st.Epoch (calling SetEpoch(st.Epoch) keeps the position).
//
// Replicas records the world size of a DistributedSampler (0 for the
// other samplers). Restoring into a sampler with a different world size
// converts the position: no sample that was not seen is skipped, a few at
// the boundary may be seen twice, and every rank skips the same number so
// the ranks stay in step.
type SamplerState struct {
	Epoch    int `json:"epoch"`
	Seen     int `json:"seen"`
	Replicas int `json:"replicas,omitempty"`
}

// position is the resumable state shared by the samplers of this package.
// Samplers are used from one goroutine (the one ranging over a Loader's
// Batches), so it needs no lock.
type position struct {
	epoch int
	// seen counts indices of the current pass handed to the training loop,
	// including those skipped by a restore.
	seen int
	// skip is the number of indices the next pass over epoch leaves out;
	// set by Restore, consumed by the next pass, dropped by SetEpoch to a
	// different epoch.
	skip int
}

func (p *position) setEpoch(epoch int) {
	if epoch < 0 {
		panic(fmt.Sprintf("data: SetEpoch(%d): negative epoch", epoch))
	}
	if epoch != p.epoch {
		p.skip = 0
	}
	p.epoch = epoch
}

func (p *position) advance(n int) { p.seen += n }

// startPass returns how many leading indices the pass leaves out.
func (p *position) startPass() int {
	skip := p.skip
	p.skip, p.seen = 0, skip
	return skip
}

func (p *position) restore(st SamplerState, length int) error {
	if st.Epoch < 0 || st.Seen < 0 || st.Seen > length {
		return fmt.Errorf("%w: epoch %d, seen %d (want epoch >= 0 and seen in [0, %d])",
			ErrInvalidState, st.Epoch, st.Seen, length)
	}
	p.epoch, p.seen, p.skip = st.Epoch, st.Seen, st.Seen
	return nil
}

// SequentialSampler visits 0, 1, …, n-1 in order.
type SequentialSampler struct {
	position
	n int
}

// NewSequentialSampler returns a sampler over n indices in order. It
// panics if n < 0.
func NewSequentialSampler(n int) *SequentialSampler {
	if n < 0 {
		panic(fmt.Sprintf("data: NewSequentialSampler(%d): negative size", n))
	}
	return &SequentialSampler{n: n}
}

// Len implements Sampler.
func (s *SequentialSampler) Len() int { return s.n }

// SetEpoch selects the epoch of the next pass.
func (s *SequentialSampler) SetEpoch(epoch int) { s.setEpoch(epoch) }

// Epoch returns the epoch of the next or current pass.
func (s *SequentialSampler) Epoch() int { return s.epoch }

// Advance implements ResumableSampler.
func (s *SequentialSampler) Advance(n int) { s.advance(n) }

// AppendIndices implements Sampler.
func (s *SequentialSampler) AppendIndices(dst []int) []int {
	for i := s.startPass(); i < s.n; i++ {
		dst = append(dst, i)
	}
	return dst
}

// State implements ResumableSampler.
func (s *SequentialSampler) State() SamplerState {
	return SamplerState{Epoch: s.epoch, Seen: s.seen}
}

// Restore implements ResumableSampler.
func (s *SequentialSampler) Restore(st SamplerState) error { return s.restore(st, s.n) }

// RandomSampler visits a permutation of 0…n-1 that depends only on seed and
// the epoch set with SetEpoch: the same seed and epoch give the same order
// on every machine and Go version.
type RandomSampler struct {
	position
	n    int
	seed uint64
}

// NewRandomSampler returns a shuffling sampler over n indices. It panics if
// n < 0.
func NewRandomSampler(n int, seed uint64) *RandomSampler {
	if n < 0 {
		panic(fmt.Sprintf("data: NewRandomSampler(%d): negative size", n))
	}
	return &RandomSampler{n: n, seed: seed}
}

// Len implements Sampler.
func (s *RandomSampler) Len() int { return s.n }

// SetEpoch selects the epoch of the next pass. Call it before each epoch:
// the permutation depends on seed+epoch, so a sampler whose epoch never
// changes repeats the same order.
func (s *RandomSampler) SetEpoch(epoch int) { s.setEpoch(epoch) }

// Epoch returns the epoch of the next or current pass.
func (s *RandomSampler) Epoch() int { return s.epoch }

// Advance implements ResumableSampler.
func (s *RandomSampler) Advance(n int) { s.advance(n) }

// AppendIndices implements Sampler.
func (s *RandomSampler) AppendIndices(dst []int) []int {
	skip := s.startPass()
	start := len(dst)
	dst = appendPermutation(dst, s.n, s.seed+uint64(s.epoch))
	return append(dst[:start], dst[start+skip:]...)
}

// State implements ResumableSampler.
func (s *RandomSampler) State() SamplerState {
	return SamplerState{Epoch: s.epoch, Seen: s.seen}
}

// Restore implements ResumableSampler.
func (s *RandomSampler) Restore(st SamplerState) error { return s.restore(st, s.n) }

// permStream is the PCG stream of every permutation. Changing it, or the
// shuffle below, changes every seeded order and so breaks resuming old
// checkpoints; TestPermutationGolden guards both.
const permStream = 0x9e3779b97f4a7c15

// appendPermutation appends a permutation of 0…n-1 to dst by a
// Fisher–Yates shuffle driven by PCG-DXSM seeded with seed. It uses only
// PCG's specified output, not math/rand's derived methods, whose
// algorithms may change between Go releases.
func appendPermutation(dst []int, n int, seed uint64) []int {
	start := len(dst)
	for i := range n {
		dst = append(dst, i)
	}
	p := dst[start:]
	src := rand.NewPCG(seed, permStream)
	for i := n - 1; i > 0; i-- {
		j := boundedRand(src, uint64(i)+1)
		p[i], p[j] = p[j], p[i]
	}
	return dst
}

// boundedRand returns a uniform integer in [0, bound) by Lemire's
// multiply-and-reject method.
func boundedRand(src *rand.PCG, bound uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), bound)
	if lo < bound {
		threshold := -bound % bound
		for lo < threshold {
			hi, lo = bits.Mul64(src.Uint64(), bound)
		}
	}
	return hi
}
