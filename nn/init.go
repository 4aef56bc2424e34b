package nn

import (
	"fmt"
	"math"
	"sync"

	"github.com/gotrain/gotrain/tensor"
)

// DefaultSeed seeds the initialisation generator until SetSeed is called,
// so that a program that never calls SetSeed still builds the same model
// every run.
const DefaultSeed = 0

// initMu guards initRNG, which layer constructors draw initial weights and
// Dropout seeds from, in construction order.
var (
	initMu  sync.Mutex
	initRNG = tensor.NewRNG(DefaultSeed)
)

// SetSeed restarts the generator that layer constructors use for initial
// weights and Dropout seeds (PyTorch's torch.manual_seed for models). After
// SetSeed(s), building the same model in the same order gives the same
// weights. Constructors running concurrently draw in an unspecified order;
// use ResetParameters with an explicit RNG when that matters.
func SetSeed(seed uint64) {
	initMu.Lock()
	defer initMu.Unlock()
	initRNG = tensor.NewRNG(seed)
}

// seededMu keeps Seeded calls from running at the same time.
var seededMu sync.Mutex

// Seeded runs build, which constructs layers, with the generator restarted
// by SetSeed(seed), while no other Seeded call runs. Several builds in one
// process, such as the ranks of a job run as goroutines, each get the
// weights they would get alone; with SetSeed and a build of their own
// they would draw from the one generator in turns the scheduler decides.
// Constructors called outside Seeded at the same time still draw from it.
func Seeded(seed uint64, build func()) {
	seededMu.Lock()
	defer seededMu.Unlock()
	SetSeed(seed)
	build()
}

// withInitRNG runs f holding the package generator.
func withInitRNG(f func(rng *tensor.RNG)) {
	initMu.Lock()
	defer initMu.Unlock()
	f(initRNG)
}

// Resetter is implemented by layers with initialisable state (Linear,
// Conv2d, BatchNorm). ResetParameters redraws the layer's parameters from
// rng with PyTorch's default scheme and resets its buffers.
type Resetter interface {
	ResetParameters(rng *tensor.RNG)
}

// ResetParameters re-initialises every layer of m that implements
// Resetter, in NamedModules order, drawing from rng: an explicit,
// goroutine-safe alternative to SetSeed.
func ResetParameters(m Module, rng *tensor.RNG) {
	for _, nm := range NamedModules(m) {
		if r, ok := nm.Module.(Resetter); ok {
			r.ResetParameters(rng)
		}
	}
}

// FanIn returns the fan-in of a weight of the given shape as PyTorch
// computes it: shape[1] times the product of the remaining (receptive
// field) dimensions, so in·kh·kw for a Conv2d weight [out,in,kh,kw] and
// in for a Linear weight [out,in]. It panics for fewer than 2 dimensions.
func FanIn(shape []int) int {
	if len(shape) < 2 {
		panic(fmt.Sprintf("nn: fan in needs a weight with at least 2 dimensions, got shape %v", shape))
	}
	fan := shape[1]
	for _, d := range shape[2:] {
		fan *= d
	}
	return fan
}

// KaimingUniform fills w from U(−bound, bound) with
// bound = √3 · gain / √fan_in and gain = √(2/(1+a²)), PyTorch's
// kaiming_uniform_ for a leaky ReLU of negative slope a in fan-in mode.
// PyTorch's Linear and Conv2d use a = √5, which gives bound = 1/√fan_in.
func KaimingUniform(rng *tensor.RNG, w *tensor.Tensor, a float64) {
	fan := FanIn(w.Shape())
	gain := math.Sqrt(2 / (1 + a*a))
	bound := math.Sqrt(3) * gain / math.Sqrt(float64(fan))
	rng.FillUniform(w, float32(-bound), float32(bound))
}

// biasInit fills b from U(−1/√fan_in, 1/√fan_in), PyTorch's default bias
// initialisation for Linear and Conv2d; fan_in 0 gives zeros.
func biasInit(rng *tensor.RNG, b *tensor.Tensor, fanIn int) {
	bound := 0.0
	if fanIn > 0 {
		bound = 1 / math.Sqrt(float64(fanIn))
	}
	rng.FillUniform(b, float32(-bound), float32(bound))
}

// fill sets every element of t to v.
func fill(t *tensor.Tensor, v float32) {
	d := t.Data()
	for i := range d {
		d[i] = v
	}
}

// WithInitRNG runs f with the generator SetSeed controls, for model
// constructors that draw their own initialisation (nanoGPT's
// normal(0, 0.02)) in construction order as the built-in layers do.
func WithInitRNG(f func(rng *tensor.RNG)) { withInitRNG(f) }
