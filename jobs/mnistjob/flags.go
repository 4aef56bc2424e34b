package mnistjob

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/jobs/jobflag"
)

// Usage is the help of the job's command, `gotrain train mnist`: its
// line, and what it trains on and prints last.
func (Config) Usage() (short, long string) {
	return "Train an MNIST classifier (MLP or the pytorch/examples CNN)",
		`Train an MNIST classifier on the copy of MNIST shipped in the binary (or
the IDX files in --data), with the test accuracy after each epoch. The last
line printed is a summary:
model= world= epochs= steps= samples_per_s= test_acc= peak_rss_mib=`
}

// flagSeed is --seed's default: 1, as in PyTorch's example scripts, whose
// runs the command line's figures compare with (a Config's zero Seed is
// seed 0).
const flagSeed = 1

// RegisterFlags defines the job's own flags on f, writing into c, each
// with the default of its Config field.
func (c *Config) RegisterFlags(f *pflag.FlagSet) {
	d := Config{}.withDefaults()
	f.StringVar(&c.Model, "model", d.Model, "mlp (784-512-512-10), cnn (the pytorch/examples MNIST Net) or cnn-bn (it with BatchNorm in place of dropout)")
	f.IntVar(&c.Epochs, "epochs", d.Epochs, "epochs to train")
	f.IntVar(&c.BatchSize, "batch-size", d.BatchSize, "batch size per worker")
	f.Float64Var(&c.LR, "lr", 0, "learning rate (default 0.01 for sgd, 1.0 for adadelta, 0.001 for adam and adamw)")
	f.StringVar(&c.Optimizer, "optimizer", "", "sgd, adadelta, adam or adamw (default sgd for mlp, adadelta for cnn and cnn-bn)")
	f.Var(jobflag.Float(&c.Momentum, d.Momentum), "momentum", "SGD momentum (0 for none)")
	f.Var(jobflag.Float(&c.Gamma, nil), "gamma", "StepLR decay of the learning rate per epoch, 0 for none (default 0.7 with adadelta, none otherwise)")
	f.StringVar(&c.LRScaling, "lr-scaling", "", "adapt --lr to the global batch of N ranks: linear (×N) or none (default linear for sgd, none for adadelta, adam and adamw)")
	f.StringVar(&c.CommHook, "comm-hook", d.CommHook, "how DDP reduces gradients: allreduce (float32), fp16 or bf16 (compressed 2×), powersgd (low-rank, see --powersgd-*)")
	c.PowerSGD.Register(f)
	f.Uint64Var(&c.Seed, "seed", flagSeed, "random seed for initialisation and shuffling")
	f.StringVar(&c.DataDir, "data", "", "directory with the MNIST IDX files (default: the copy shipped in the binary)")
	f.IntVar(&c.MaxSteps, "max-steps", 0, "stop after N steps per worker (default: no limit)")
	f.BoolVar(&c.SyncBN, "sync-bn", false, "BatchNorm over the global batch of all workers (SyncBatchNorm; --model cnn-bn)")
}

// CheckFlags refuses the values of the job's flags it would not run
// with, each error naming the flag (see jobflag.Error).
func (c *Config) CheckFlags(f *pflag.FlagSet) error {
	if err := jobflag.OneOf("model", c.Model, "mlp", "cnn", "cnn-bn"); err != nil {
		return err
	}
	if c.SyncBN && c.Model != "cnn-bn" {
		return jobflag.Needs("sync-bn", "the "+c.Model+" model has no BatchNorm layer (use --model cnn-bn)")
	}
	if err := jobflag.AtLeast("epochs", c.Epochs, 1); err != nil {
		return err
	}
	if err := jobflag.AtLeast("batch-size", c.BatchSize, 1); err != nil {
		return err
	}
	if f.Changed("lr") {
		if err := jobflag.Positive("lr", c.LR); err != nil {
			return err
		}
	}
	if f.Changed("optimizer") || c.Optimizer != "" {
		if err := jobflag.OneOf("optimizer", c.Optimizer, "sgd", "adadelta", "adam", "adamw"); err != nil {
			return err
		}
	}
	opt := c.withDefaults().Optimizer
	if m := c.Momentum; m != nil {
		if !(*m >= 0) || math.IsInf(*m, 0) {
			return jobflag.Bad("momentum", *m, "must be a number of at least 0 (0 for none)")
		}
		if opt != "sgd" {
			return jobflag.Bad("momentum", *m, "applies only to --optimizer sgd (the optimizer is "+opt+")")
		}
	}
	if g := c.Gamma; g != nil && (!(*g >= 0) || math.IsInf(*g, 0)) {
		return jobflag.Bad("gamma", *g, "must be a finite number of at least 0 (0 for no decay)")
	}
	if c.LRScaling != "" && c.LRScaling != "linear" && c.LRScaling != "none" {
		return jobflag.Bad("lr-scaling", c.LRScaling, "must be linear or none")
	}
	if err := jobflag.OneOf("comm-hook", c.CommHook, "allreduce", "fp16", "bf16", "powersgd"); err != nil {
		return err
	}
	if err := c.PowerSGD.Check(f, c.CommHook); err != nil {
		return err
	}
	if f.Changed("max-steps") && c.MaxSteps < 1 {
		return jobflag.Bad("max-steps", c.MaxSteps, "must be at least 1 (leave it out for no limit)")
	}
	if f.Changed("data") {
		return checkDataDir("data", c.DataDir)
	}
	return nil
}

// idxFiles are the IDX files a data directory must hold (raw or .gz, in
// it or in its MNIST/raw, as datasets/mnist.Load looks for them).
var idxFiles = []string{"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}

// checkDataDir refuses a data directory flag without the four MNIST files.
func checkDataDir(name, dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return jobflag.Bad(name, dir, "does not exist")
	case err != nil:
		return jobflag.Bad(name, dir, jobflag.RootCause(err))
	case !info.IsDir():
		return jobflag.Bad(name, dir, "is not a directory")
	}
	var missing []string
	for _, f := range idxFiles {
		found := false
		for _, d := range []string{dir, filepath.Join(dir, "MNIST", "raw")} {
			for _, p := range []string{f, f + ".gz"} {
				if fi, err := os.Stat(filepath.Join(d, p)); err == nil && fi.Mode().IsRegular() {
					found = true
				}
			}
		}
		if !found {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return jobflag.Bad(name, dir, "missing "+strings.Join(missing, ", ")+
			" (want the four MNIST IDX files, raw or .gz, in it or in its MNIST/raw)")
	}
	return nil
}
