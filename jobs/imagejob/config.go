package imagejob

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"

	"github.com/gotrain/gotrain/data/images"
	"github.com/gotrain/gotrain/harness"
)

// Config is one training run. The zero value of each field means the
// default its comment gives; Dir is the one field without a default.
type Config struct {
	// Config is how the job runs: joining the other ranks, checkpoints
	// and resuming, precision, progress, metrics and output (see
	// harness.Config).
	harness.Config

	// Dir is the training images, a subfolder per class (see
	// images.NewFolder).
	Dir string
	// ValDir is the validation images, with the same class folders; ""
	// splits ValFraction of Dir off instead.
	ValDir string
	// ValFraction is the share of Dir's images kept for validation when
	// ValDir is "" (picked by Seed, the same on every rank); nil means
	// 0.1, new(0.0) no validation.
	ValFraction *float64
	Model       string // "resnet18" (default), "resnet34" or "resnet50"
	// Stem is the ResNet's first layers: "cifar" (3×3 convolution, no
	// pooling, for small images) or "imagenet" (7×7 stride-2 convolution
	// and max pooling); "" means cifar for ImageSize up to 64, imagenet
	// above.
	Stem      string
	ImageSize int     // images are resized to ImageSize×ImageSize; default 32
	BatchSize int     // per rank; default 128
	Epochs    int     // default 1
	LR        float64 // SGD's (momentum 0.9, weight decay 5e-4), cosine-annealed to 0 over Epochs; default 0.1
	// Workers is the goroutines that decode and augment each batch;
	// 0 means this rank's share of the host's CPUs less one, leaving a
	// CPU to the training step: GOMAXPROCS ÷ LOCAL_WORLD_SIZE (the ranks
	// on this host, as the launchers set it) − 1, at least 1.
	Workers int
	// CacheMiB bounds the decoded images kept in memory (see
	// images.CacheBytes); nil means 512 (images.DefaultCacheBytes),
	// new(0) no cache.
	CacheMiB *int
	Seed     uint64 // initialisation, shuffling, augmentation and the validation split; default 0
	MaxSteps int    // stop after N steps per rank in this run; 0 means no limit (for benchmarks and tests)
}

// Models are the networks the job trains.
var Models = []string{"resnet18", "resnet34", "resnet50"}

// withDefaults returns c with its zero fields replaced by their
// defaults: the one place they are written.
func (c Config) withDefaults() Config {
	if c.Model == "" {
		c.Model = "resnet18"
	}
	if c.ImageSize == 0 {
		c.ImageSize = 32
	}
	if c.Stem == "" {
		c.Stem = "cifar"
		if c.ImageSize > 64 {
			c.Stem = "imagenet"
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = 128
	}
	if c.Epochs == 0 {
		c.Epochs = 1
	}
	if c.LR == 0 {
		c.LR = 0.1
	}
	if c.CacheMiB == nil {
		c.CacheMiB = new(images.DefaultCacheBytes >> 20)
	}
	if c.ValFraction == nil {
		c.ValFraction = new(0.1)
		if c.ValDir != "" {
			c.ValFraction = new(0.0)
		}
	}
	return c
}

// check rejects what the job cannot run with, before it joins a process
// group or reads the data, in one line naming the field.
func (c *Config) check() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("Dir: want the folder of training images")
	case c.Model != "" && c.Model != "resnet18" && c.Model != "resnet34" && c.Model != "resnet50":
		return fmt.Errorf("Model %q: want resnet18, resnet34 or resnet50", c.Model)
	case c.Stem != "" && c.Stem != "cifar" && c.Stem != "imagenet":
		return fmt.Errorf("Stem %q: want cifar or imagenet", c.Stem)
	case c.ImageSize < 0:
		return fmt.Errorf("ImageSize %d: want at least 1 (0 means 32)", c.ImageSize)
	case c.BatchSize < 0:
		return fmt.Errorf("BatchSize %d: want at least 1 (0 means 128)", c.BatchSize)
	case c.Epochs < 0:
		return fmt.Errorf("Epochs %d: want at least 1 (0 means 1)", c.Epochs)
	case c.LR < 0 || math.IsNaN(c.LR) || math.IsInf(c.LR, 0):
		return fmt.Errorf("LR %v: want a number > 0 (0 means 0.1)", c.LR)
	case c.Workers < 0:
		return fmt.Errorf("Workers %d: want at least 1 (0 means a CPU's share less one)", c.Workers)
	case c.CacheMiB != nil && *c.CacheMiB < 0:
		return fmt.Errorf("CacheMiB %d: want at least 0 (0 for no cache)", *c.CacheMiB)
	case c.ValFraction != nil && !(*c.ValFraction >= 0 && *c.ValFraction < 1):
		return fmt.Errorf("ValFraction %v: want a number in [0, 1)", *c.ValFraction)
	case c.ValDir != "" && c.ValFraction != nil && *c.ValFraction > 0:
		return fmt.Errorf("ValFraction %v: a validation folder (ValDir) is given", *c.ValFraction)
	case c.MaxSteps < 0:
		return fmt.Errorf("MaxSteps %d: want at least 1 (0 means no limit)", c.MaxSteps)
	}
	return nil
}

// decodeWorkers is c.Workers, or for 0 its default: this rank's share of
// the CPUs less one, at least 1. An unset or invalid LOCAL_WORLD_SIZE
// counts as one rank: the value only tunes speed.
func (c Config) decodeWorkers() int {
	if c.Workers > 0 {
		return c.Workers
	}
	ranks := 1
	if n, err := strconv.Atoi(os.Getenv("LOCAL_WORLD_SIZE")); err == nil && n > 1 {
		ranks = n
	}
	return max(1, runtime.GOMAXPROCS(0)/ranks-1)
}
