package tensor

import (
	"math"
	"math/rand/v2"
)

// RNG is a seeded, deterministic random source (PCG) for initialisation,
// dropout masks and shuffling. The same seed gives the same stream on every
// platform. An RNG is not safe for concurrent use.
type RNG struct {
	r *rand.Rand
}

// NewRNG returns a generator seeded with seed.
func NewRNG(seed uint64) *RNG {
	// The second PCG word is a fixed odd constant so that seed alone picks
	// the stream; it mixes seed so that small seeds do not start alike.
	return &RNG{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Uint64 returns a uniformly distributed 64-bit value.
func (r *RNG) Uint64() uint64 { return r.r.Uint64() }

// Float32 returns a uniform value in [0, 1).
func (r *RNG) Float32() float32 { return r.r.Float32() }

// Uniform returns a uniform value in [lo, hi).
func (r *RNG) Uniform(lo, hi float32) float32 {
	return lo + (hi-lo)*r.r.Float32()
}

// Normal returns a standard normal value.
func (r *RNG) Normal() float32 { return float32(r.r.NormFloat64()) }

// Bernoulli returns true with probability p.
func (r *RNG) Bernoulli(p float32) bool { return r.r.Float32() < p }

// Perm returns a random permutation of 0..n-1.
func (r *RNG) Perm(n int) []int { return r.r.Perm(n) }

// Intn returns a uniform value in [0, n). It panics if n <= 0.
func (r *RNG) Intn(n int) int { return r.r.IntN(n) }

// FillUniform sets every element of t to a uniform value in [lo, hi).
func (r *RNG) FillUniform(t *Tensor, lo, hi float32) {
	for i := range t.data {
		t.data[i] = lo + (hi-lo)*r.r.Float32()
	}
}

// FillNormal sets every element of t to a normal value with the given mean
// and standard deviation.
func (r *RNG) FillNormal(t *Tensor, mean, std float32) {
	for i := range t.data {
		t.data[i] = mean + std*float32(r.r.NormFloat64())
	}
}

// Randn returns a tensor of standard normal values drawn from rng.
func Randn(rng *RNG, shape ...int) *Tensor {
	t := Zeros(shape...)
	rng.FillNormal(t, 0, 1)
	return t
}

// Rand returns a tensor of uniform values in [0, 1) drawn from rng.
func Rand(rng *RNG, shape ...int) *Tensor {
	t := Zeros(shape...)
	rng.FillUniform(t, 0, 1)
	return t
}

// bernoulliThreshold maps a keep probability to a 32-bit threshold so that
// a mask needs one 32-bit draw per element: u < threshold has probability p.
func bernoulliThreshold(p float32) uint64 {
	if p >= 1 {
		return 1 << 32
	}
	if p <= 0 {
		return 0
	}
	return uint64(math.Round(float64(p) * (1 << 32)))
}
