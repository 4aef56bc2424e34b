package mnistjob

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/jobs/jobflag"
)

// Config is one training run. The zero value of each field means the
// default its comment gives, so Config{} trains the MLP for one epoch in
// this process (or as one rank of the job its environment names): the
// defaults of `gotrain train mnist`, whose flags take them from here.
type Config struct {
	// Config is how the job runs: joining the other ranks, checkpoints
	// and resuming, the precision of the matmuls and convolutions,
	// progress, metrics and output (see harness.Config).
	harness.Config

	Model     string  // "mlp" (784-512-512-10, the default), "cnn" (the pytorch/examples MNIST Net) or "cnn-bn" (it with BatchNorm in place of dropout)
	Epochs    int     // default 1
	BatchSize int     // per rank; default 64
	Optimizer string  // "sgd", "adadelta", "adam" or "adamw" (weight decay 0.01, PyTorch's default); default sgd for mlp, adadelta for cnn and cnn-bn
	LR        float64 // default 0.01 (sgd), 1.0 (adadelta), 0.001 (adam, adamw)
	// Momentum is SGD's; nil means 0.9, and new(0.0) none.
	Momentum *float64
	// Gamma is the StepLR decay of the learning rate per epoch; nil means
	// 0.7 with adadelta and none otherwise, new(0.0) none.
	Gamma *float64
	// LRScaling adapts LR to the number of ranks, whose global batch is
	// world × BatchSize: "linear" multiplies it by world (Goyal et al.'s
	// rule, so N ranks train like one), "none" keeps it; "" means linear
	// for SGD and none for the adaptive Adadelta, Adam and AdamW.
	LRScaling string
	CommHook  string // DDP gradient reduction: "allreduce" (default), "fp16", "bf16" or "powersgd" (low-rank, tuned by PowerSGD)
	PowerSGD  jobflag.PowerSGD
	Seed      uint64 // initialisation and shuffling; default 0
	DataDir   string // IDX files; "" uses the copy shipped in the binary
	MaxSteps  int    // stop after N steps per rank in this run; 0 means no limit (for benchmarks and tests)
	// SyncBN makes the BatchNorm layers of Model "cnn-bn" normalise over
	// the global batch of all ranks (SyncBatchNorm), not each rank's own.
	SyncBN bool
}

// defaultLR is each optimizer's learning rate when Config.LR is 0.
var defaultLR = map[string]float64{"sgd": 0.01, "adadelta": 1.0, "adam": 0.001, "adamw": 0.001}

// withDefaults returns c with its zero fields replaced by their
// defaults: the one place they are written.
func (c Config) withDefaults() Config {
	if c.Model == "" {
		c.Model = "mlp"
	}
	if c.Epochs == 0 {
		c.Epochs = 1
	}
	if c.BatchSize == 0 {
		c.BatchSize = 64
	}
	if c.Optimizer == "" {
		c.Optimizer = "sgd"
		if c.Model == "cnn" || c.Model == "cnn-bn" {
			c.Optimizer = "adadelta"
		}
	}
	if c.LR == 0 {
		c.LR = defaultLR[c.Optimizer]
	}
	if c.Momentum == nil {
		c.Momentum = new(0.9)
	}
	if c.Gamma == nil {
		c.Gamma = new(0.0)
		if c.Optimizer == "adadelta" {
			c.Gamma = new(0.7)
		}
	}
	if c.LRScaling == "" {
		c.LRScaling = "none"
		if c.Optimizer == "sgd" {
			c.LRScaling = "linear"
		}
	}
	if c.CommHook == "" {
		c.CommHook = "allreduce"
	}
	return c
}

// check rejects unknown choices and impossible numbers before the job
// joins a process group or loads data, so a typo fails at once, on every
// rank, with one line naming the field and the value it was given (zero
// values, the defaults, pass).
func (c *Config) check() error {
	finite := func(v *float64) bool { return v == nil || !math.IsNaN(*v) && !math.IsInf(*v, 0) }
	switch {
	case c.Model != "" && c.Model != "mlp" && c.Model != "cnn" && c.Model != "cnn-bn":
		return fmt.Errorf("Model %q: want mlp, cnn or cnn-bn", c.Model)
	case c.SyncBN && c.Model != "cnn-bn":
		return fmt.Errorf("SyncBN: model %q has no BatchNorm layer (want Model cnn-bn)", c.withDefaults().Model)
	case c.Optimizer != "" && defaultLR[c.Optimizer] == 0:
		return fmt.Errorf("Optimizer %q: want sgd, adadelta, adam or adamw", c.Optimizer)
	case jobflag.CheckCommHook("CommHook", c.CommHook, c.PowerSGD) != nil:
		return jobflag.CheckCommHook("CommHook", c.CommHook, c.PowerSGD)
	case c.LRScaling != "" && c.LRScaling != "linear" && c.LRScaling != "none":
		return fmt.Errorf("LRScaling %q: want linear or none", c.LRScaling)
	case c.Epochs < 0:
		return fmt.Errorf("Epochs %d: want at least 1 (0 means 1)", c.Epochs)
	case c.BatchSize < 0:
		return fmt.Errorf("BatchSize %d: want at least 1 (0 means 64)", c.BatchSize)
	case c.MaxSteps < 0:
		return fmt.Errorf("MaxSteps %d: want at least 1 (0 means no limit)", c.MaxSteps)
	case c.LR < 0 || math.IsNaN(c.LR) || math.IsInf(c.LR, 0):
		return fmt.Errorf("LR %v: want a number > 0 (0 means the optimizer's default)", c.LR)
	case !finite(c.Momentum) || c.Momentum != nil && *c.Momentum < 0:
		return fmt.Errorf("Momentum %v: want a finite number >= 0 (0 for none)", *c.Momentum)
	case !finite(c.Gamma) || c.Gamma != nil && *c.Gamma < 0:
		return fmt.Errorf("Gamma %v: want a finite number >= 0 (0 for no decay)", *c.Gamma)
	}
	return nil
}

// scaledLR is the learning rate for world ranks (see Config.LRScaling).
func scaledLR(c Config, world int) float64 {
	if c.LRScaling == "linear" || c.LRScaling == "" && c.Optimizer == "sgd" {
		return c.LR * float64(world)
	}
	return c.LR
}
