package imagejob

import (
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/jobs/jobflag"
)

// Usage is the help of the job's command, `gotrain train images DIR`.
func (Config) Usage() (short, long string) {
	return "Train a ResNet image classifier on a folder of PNG and JPEG images",
		`Train a ResNet (18, 34 or 50) on the images in DIR, a subfolder per class
as torchvision's ImageFolder reads it, with the CIFAR augmentation (random
crop with padding, horizontal flip), SGD with momentum 0.9, weight decay
5e-4 and a cosine learning rate, and the validation accuracy after each
epoch (on --val DIR2, or on --val-fraction of DIR). Images are decoded on
--workers goroutines, and kept decoded in memory when they fit in
--cache-mib. The last line printed is a summary:
model= world= epochs= samples_per_s= train_loss= val_accuracy= peak_rss_mib=`
}

// ArgsUsage names the job's argument in its usage line.
func (Config) ArgsUsage() string { return "DIR" }

// SetArgs takes the job's one argument, the folder of training images.
func (c *Config) SetArgs(args []string) error {
	switch len(args) {
	case 0:
		return errors.New("missing DIR, the folder of training images (a subfolder per class)")
	case 1:
		c.Dir = args[0]
		return nil
	}
	return fmt.Errorf("unexpected argument %q (it takes one folder, DIR)", args[1])
}

// RegisterFlags defines the job's own flags on f, writing into c, each
// with the default of its Config field.
func (c *Config) RegisterFlags(f *pflag.FlagSet) {
	d := Config{}.withDefaults()
	f.StringVar(&c.ValDir, "val", "", "folder of validation images, with DIR's class folders (default: --val-fraction of DIR)")
	f.Var(jobflag.Float(&c.ValFraction, nil), "val-fraction", "share of DIR kept for validation when --val is not given, 0 for none (default 0.1)")
	f.StringVar(&c.Model, "model", d.Model, "resnet18, resnet34 or resnet50")
	f.StringVar(&c.Stem, "stem", "", "the ResNet's first layers: cifar (3×3 conv, for small images) or imagenet (7×7/2 conv and max pool) (default cifar up to --image-size 64, imagenet above)")
	f.IntVar(&c.ImageSize, "image-size", d.ImageSize, "resize images to this many pixels square")
	f.IntVar(&c.BatchSize, "batch-size", d.BatchSize, "batch size per worker")
	f.IntVar(&c.Epochs, "epochs", d.Epochs, "epochs to train")
	f.Float64Var(&c.LR, "lr", d.LR, "SGD learning rate (momentum 0.9, weight decay 5e-4), cosine-annealed to 0 over --epochs")
	f.IntVar(&c.Workers, "workers", 0, "goroutines decoding and augmenting images per worker (default: its share of the CPUs less one, at least 1)")
	f.Var(jobflag.Int(&c.CacheMiB, d.CacheMiB), "cache-mib", "keep the decoded images in memory when they fit in this many MiB (0: decode every time)")
	f.Uint64Var(&c.Seed, "seed", 0, "random seed for initialisation, shuffling, augmentation and the validation split")
	f.IntVar(&c.MaxSteps, "max-steps", 0, "stop after N steps per worker (default: no limit)")
}

// CheckFlags refuses the values of the job's flags it would not run
// with, each error naming the flag (see jobflag.Error).
func (c *Config) CheckFlags(f *pflag.FlagSet) error {
	if err := jobflag.OneOf("model", c.Model, Models...); err != nil {
		return err
	}
	if f.Changed("stem") || c.Stem != "" {
		if err := jobflag.OneOf("stem", c.Stem, "cifar", "imagenet"); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		name string
		v    int
	}{{"image-size", c.ImageSize}, {"batch-size", c.BatchSize}, {"epochs", c.Epochs}} {
		if err := jobflag.AtLeast(s.name, s.v, 1); err != nil {
			return err
		}
	}
	if err := jobflag.Positive("lr", c.LR); err != nil {
		return err
	}
	if f.Changed("workers") && c.Workers < 1 {
		return jobflag.Bad("workers", c.Workers, "must be at least 1 (leave it out for the worker's share of the CPUs less one)")
	}
	if m := c.CacheMiB; m != nil && *m < 0 {
		return jobflag.Bad("cache-mib", *m, "must be at least 0 (0 for no cache)")
	}
	if v := c.ValFraction; v != nil {
		if !(*v >= 0 && *v < 1) || math.IsInf(*v, 0) {
			return jobflag.Bad("val-fraction", *v, "must be a number in [0, 1) (0 for no validation)")
		}
		if c.ValDir != "" {
			return jobflag.Bad("val-fraction", *v, "applies only without --val (the validation images are --val's)")
		}
	}
	if f.Changed("max-steps") && c.MaxSteps < 1 {
		return jobflag.Bad("max-steps", c.MaxSteps, "must be at least 1 (leave it out for no limit)")
	}
	if err := checkDir("", c.Dir); err != nil {
		return err
	}
	if c.ValDir != "" {
		return checkDir("val", c.ValDir)
	}
	return nil
}

// checkDir refuses a folder argument or flag (name "" for DIR) that is
// not a directory. Its content is checked when the job reads it.
func checkDir(name, dir string) error {
	bad := func(why string) error {
		if name == "" {
			return fmt.Errorf("DIR %s: %s", dir, why)
		}
		return jobflag.Bad(name, dir, why)
	}
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return bad("does not exist")
	case err != nil:
		return bad(jobflag.RootCause(err))
	case !info.IsDir():
		return bad("is not a directory (want a folder with a subfolder of images per class)")
	}
	return nil
}
