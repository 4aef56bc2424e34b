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
	// pcg is r's source, called directly where a loop draws many words
	// (dropout masks): the same stream without rand.Rand's interface call.
	pcg *rand.PCG
}

// NewRNG returns a generator seeded with seed.
func NewRNG(seed uint64) *RNG {
	// The second PCG word is a fixed odd constant so that seed alone picks
	// the stream; it mixes seed so that small seeds do not start alike.
	pcg := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	return &RNG{r: rand.New(pcg), pcg: pcg}
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

// bernoulliThreshold maps a keep probability to a threshold on draws of
// the given number of bits (16 or 32): a uniform draw u is below it with
// probability p, rounded to a multiple of 2^-bits.
func bernoulliThreshold(p float32, bits uint) uint64 {
	if p >= 1 {
		return 1 << bits
	}
	if p <= 0 {
		return 0
	}
	return uint64(math.Round(float64(p) * float64(uint64(1)<<bits)))
}

// maskBits returns how many bits a dropout mask draws per element for keep
// probability p: 16 (four elements per 64-bit PCG output) when rounding p
// and 1−p to multiples of 2^-16 changes each by at most 10^-4 of itself
// (exactly for p = 0.5 or 0.75; 10^-4 relative at worst for rates down to
// about 0.076), else 32.
func maskBits(p float32) uint {
	q := float64(bernoulliThreshold(p, 16)) / (1 << 16)
	pp := float64(p)
	if d := math.Abs(q - pp); d <= 1e-4*min(pp, 1-pp) {
		return 16
	}
	return 32
}
