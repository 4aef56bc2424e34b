package data

import (
	"fmt"
	"os"
	"strconv"

	"github.com/gotrain/gotrain/internal/cpu"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/internal/logging"
	"github.com/gotrain/gotrain/internal/option"
)

// Option configures NewLoader or NewDistributedSampler: DropLast serves
// both, Prefetch only the loader, Shuffle and Seed only the sampler. Giving
// a constructor an option it does not take panics, since it is a mistake
// in the program.
type Option func(*config)

// config holds every option of the package; each constructor reads its
// own fields.
type config struct {
	dropLast bool // loader and sampler
	prefetch int  // loader; -1 until set: decided by resolvePrefetch
	workers  int  // loader; 0 means 1
	shuffle  bool // sampler
	seed     uint64
	option.Given
}

// apply runs opts over c and panics if one of them is not in takes.
func (c config) apply(ctor string, opts []Option, takes ...string) config {
	option.Apply("data", ctor, &c, &c.Given, opts, takes...)
	return c
}

// DropLast, given to NewLoader, drops an epoch's last batch when it is
// smaller than the batch size. Given to NewDistributedSampler, it drops the
// tail of the dataset so that it divides evenly among the replicas instead
// of padding it with repeated samples (PyTorch's drop_last). Default false
// for both.
func DropLast(drop bool) Option {
	return func(c *config) { c.dropLast = drop; c.Mark("DropLast") }
}

// defaultPrefetch is the number of batches a Loader assembles ahead when a
// CPU is spare for it (see Prefetch).
const defaultPrefetch = 2

// Prefetch sets how many batches a Loader assembles ahead of the training
// loop on its background goroutine. 0 assembles each batch synchronously in
// the loop, with no goroutine.
//
// The default follows the policy DDP's overlap default follows
// (ddp.OverlapComm): 2 batches when this process has a CPU to spare
// for the goroutine, else 0. No CPU is spare when several ranks share this
// host (LOCAL_WORLD_SIZE, as `gotrain run` and torchrun set it) and their
// compute threads, ranks × GOTRAIN_NUM_THREADS, take all of its CPUs: a
// producer goroutine could then only run on a CPU another rank computes
// on, delaying that rank, and every rank waits for the slowest at each
// allreduce. A single process always prefetches by default.
//
// Prefetch panics if n < 0.
func Prefetch(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("data: Prefetch(%d): negative batch count", n))
	}
	return func(c *config) { c.prefetch = n; c.Mark("Prefetch") }
}

// Workers sets how many goroutines a Loader assembles each batch with:
// the batch's examples are split into n runs, and the Dataset's Example
// is called from the n goroutines at once, each on its own examples (the
// batch is the same whatever n). Decoding datasets, such as images read
// from files, use it to keep up with training. Default 1.
//
// Workers panics if n < 1.
func Workers(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("data: Workers(%d): want at least 1 goroutine", n))
	}
	return func(c *config) { c.workers = n; c.Mark("Workers") }
}

// Shuffle makes a DistributedSampler permute the dataset every epoch
// (seeded by seed+epoch, identically on every rank). Default true.
func Shuffle(shuffle bool) Option {
	return func(c *config) { c.shuffle = shuffle; c.Mark("Shuffle") }
}

// Seed sets the base seed of a DistributedSampler's permutations. Every
// rank must use the same seed. Default 0.
func Seed(seed uint64) Option {
	return func(c *config) { c.seed = seed; c.Mark("Seed") }
}

// envLocalWorldSize is the number of ranks on this host, as the launchers
// set it.
const envLocalWorldSize = "LOCAL_WORLD_SIZE"

// resolvePrefetch fills the prefetch default from the environment: the one
// place this package reads it. An unset LOCAL_WORLD_SIZE means one rank; an
// invalid one is logged and read as one rank, since the value only tunes
// speed, never results.
func (c config) resolvePrefetch() config {
	if c.prefetch >= 0 {
		return c
	}
	ranks := 1
	if s, ok := os.LookupEnv(envLocalWorldSize); ok && s != "" {
		n, err := strconv.Atoi(s)
		if err == nil && n >= 1 {
			ranks = n
		} else {
			logging.Default().Warn("data: ignoring invalid rank count", "env", envLocalWorldSize, "value", s, "using", ranks)
		}
	}
	c.prefetch = 0
	if cpu.Spare(ranks, kernels.NumThreads()) {
		c.prefetch = defaultPrefetch
	}
	return c
}
