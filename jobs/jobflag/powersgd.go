package jobflag

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/ddp"
)

// DefaultPowerSGDStart is the steps a job averages in float32 before
// PowerSGD compression starts. PyTorch's default, 1000, would leave a
// one-epoch MNIST run (469 steps on 2 workers) uncompressed; 10 steps get
// past the first, largest gradients, where compressing costs accuracy.
const DefaultPowerSGDStart = 10

// PowerSGD tunes a job's comm hook "powersgd" (see ddp.PowerSGDConfig).
// The zero value of each field means the default its comment gives.
type PowerSGD struct {
	// Rank is the matrix approximation rank; 0 means 1.
	Rank int
	// StartIter is the steps reduced in float32 before compression
	// starts; nil means DefaultPowerSGDStart.
	StartIter *int
	// MinCompressionRate: a gradient matrix is compressed only if that
	// makes it this many times smaller; 0 means 2.
	MinCompressionRate float64
	// NoErrorFeedback and NoWarmStart turn off error feedback and the
	// warm start of the power iteration, both on by default.
	NoErrorFeedback, NoWarmStart bool
}

// powerSGDFlags are the flags Register defines, for Check.
var powerSGDFlags = []string{"powersgd-rank", "powersgd-start-iter", "powersgd-min-compression-rate",
	"powersgd-no-error-feedback", "powersgd-no-warm-start"}

// Register defines the --powersgd-* flags on f, writing into p.
func (p *PowerSGD) Register(f *pflag.FlagSet) {
	start := DefaultPowerSGDStart
	f.IntVar(&p.Rank, "powersgd-rank", 1, "with --comm-hook powersgd: rank of each gradient's low-rank approximation (1, 2, 4...: lower compresses more)")
	f.Var(Int(&p.StartIter, &start), "powersgd-start-iter", "with --comm-hook powersgd: steps averaged in float32 before compression starts")
	f.Float64Var(&p.MinCompressionRate, "powersgd-min-compression-rate", 2, "with --comm-hook powersgd: compress a gradient matrix only if this makes it this many times smaller")
	f.BoolVar(&p.NoErrorFeedback, "powersgd-no-error-feedback", false, "with --comm-hook powersgd: drop what compression loses instead of adding it to the next step")
	f.BoolVar(&p.NoWarmStart, "powersgd-no-warm-start", false, "with --comm-hook powersgd: start each step's power iteration from a random matrix, not the last step's")
}

// Check refuses --powersgd-* flags given without --comm-hook powersgd
// (hook is the comm hook chosen) and values out of range.
func (p *PowerSGD) Check(f *pflag.FlagSet, hook string) error {
	if hook != "powersgd" {
		for _, name := range powerSGDFlags {
			if f.Changed(name) {
				return Needs(name, "applies only to --comm-hook powersgd (the comm hook is "+hook+")")
			}
		}
		return nil
	}
	if err := AtLeast("powersgd-rank", p.Rank, 1); err != nil {
		return err
	}
	if p.StartIter != nil {
		if err := AtLeast("powersgd-start-iter", *p.StartIter, 0); err != nil {
			return err
		}
	}
	if f.Changed("powersgd-min-compression-rate") {
		return Positive("powersgd-min-compression-rate", p.MinCompressionRate)
	}
	return nil
}

// Config returns the hook's configuration with p's defaults filled in, or
// an error naming the field out of range.
func (p PowerSGD) Config() (ddp.PowerSGDConfig, error) {
	c := ddp.DefaultPowerSGDConfig()
	c.StartIter = DefaultPowerSGDStart
	if p.Rank != 0 {
		c.Rank = p.Rank
	}
	if p.StartIter != nil {
		c.StartIter = *p.StartIter
	}
	if p.MinCompressionRate != 0 {
		c.MinCompressionRate = p.MinCompressionRate
	}
	c.ErrorFeedback, c.WarmStart = !p.NoErrorFeedback, !p.NoWarmStart
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("PowerSGD: %w", err)
	}
	return c, nil
}

// commHooks are the stateless DDP reductions a job's --comm-hook names;
// "powersgd" has state and is made by CommHook.
var commHooks = map[string]ddp.CommHook{"": ddp.AllReduceHook, "allreduce": ddp.AllReduceHook,
	"fp16": ddp.FP16CompressHook, "bf16": ddp.BF16CompressHook}

// CheckCommHook returns an error naming field if name is not a comm hook
// a job knows, or if it is "powersgd" with p out of range.
func CheckCommHook(field, name string, p PowerSGD) error {
	if name == "powersgd" {
		_, err := p.Config()
		return err
	}
	if commHooks[name] == nil {
		return fmt.Errorf("%s %q: want allreduce, fp16, bf16 or powersgd", field, name)
	}
	return nil
}

// CommHook returns the DDP option that installs the reduction name
// names. For "powersgd" in a world of more than one rank it also returns
// the hook, whose state belongs in the training checkpoint.
func CommHook(name string, p PowerSGD, world int) (ddp.Option, *ddp.PowerSGD, error) {
	if name != "powersgd" {
		h := commHooks[name]
		if h == nil {
			return nil, nil, fmt.Errorf("comm hook %q: want allreduce, fp16, bf16 or powersgd", name)
		}
		return ddp.WithCommHook(h), nil, nil
	}
	cfg, err := p.Config()
	if err != nil {
		return nil, nil, err
	}
	h, err := ddp.NewPowerSGD(cfg)
	if err != nil {
		return nil, nil, err
	}
	if world <= 1 {
		return ddp.WithBucketHook(h), nil, nil // nothing is reduced, so no state to keep
	}
	return ddp.WithBucketHook(h), h, nil
}
