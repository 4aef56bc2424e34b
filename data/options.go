package data

// LoaderOption configures a Loader.
type LoaderOption interface{ applyLoader(*loaderConfig) }

// SamplerOption configures a DistributedSampler.
type SamplerOption interface{ applySampler(*samplerConfig) }

type loaderConfig struct {
	dropLast bool
	prefetch int
}

type samplerConfig struct {
	shuffle  bool
	seed     uint64
	dropLast bool
}

// DropLastOption is both a LoaderOption and a SamplerOption; see DropLast.
type DropLastOption bool

func (o DropLastOption) applyLoader(c *loaderConfig)   { c.dropLast = bool(o) }
func (o DropLastOption) applySampler(c *samplerConfig) { c.dropLast = bool(o) }

// DropLast, given to NewLoader, drops an epoch's last batch when it is
// smaller than the batch size. Given to NewDistributedSampler, it drops the
// tail of the dataset so that it divides evenly among the replicas instead
// of padding it with repeated samples (PyTorch's drop_last). Default false
// for both.
func DropLast(drop bool) DropLastOption { return DropLastOption(drop) }

type prefetchOption int

func (o prefetchOption) applyLoader(c *loaderConfig) { c.prefetch = int(o) }

// Prefetch sets how many batches a Loader assembles ahead of the training
// loop on its background goroutine. 0 assembles each batch synchronously in
// the loop, with no goroutine. Default 2. It panics if n < 0.
func Prefetch(n int) LoaderOption {
	if n < 0 {
		panic("data: Prefetch: negative batch count")
	}
	return prefetchOption(n)
}

type shuffleOption bool

func (o shuffleOption) applySampler(c *samplerConfig) { c.shuffle = bool(o) }

// Shuffle makes a DistributedSampler permute the dataset every epoch
// (seeded by seed+epoch, identically on every rank). Default true.
func Shuffle(shuffle bool) SamplerOption { return shuffleOption(shuffle) }

type seedOption uint64

func (o seedOption) applySampler(c *samplerConfig) { c.seed = uint64(o) }

// Seed sets the base seed of a DistributedSampler's permutations. Every
// rank must use the same seed. Default 0.
func Seed(seed uint64) SamplerOption { return seedOption(seed) }
