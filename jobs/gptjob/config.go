package gptjob

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/jobs/jobflag"
)

// Config is one training run. The zero value of each field means the
// default its comment gives, so Config{} trains the default GPT on the
// shipped corpus in this process (or as one rank of the job its
// environment names): the defaults of `gotrain train gpt`, whose flags
// take them from here. A field whose zero is a setting of its own (no
// warm-up, no weight decay) is a pointer, nil for the default:
// WarmupSteps: new(0) trains without warm-up.
type Config struct {
	// Config is how the job runs: joining the other ranks, checkpoints
	// and resuming, the precision of the matmuls, progress (in tokens),
	// metrics (a row's samples are the step's tokens) and output (see
	// harness.Config).
	harness.Config

	// Preset is a GPT-2 size (see Presets): "gpt2", "gpt2-medium",
	// "gpt2-large" or "gpt2-xl". It sets NLayer, NHead, NEmbd and
	// BlockSize where those are 0; "" leaves them to their defaults.
	Preset string

	NLayer    int     // transformer blocks; default 4
	NHead     int     // attention heads; default 4
	NEmbd     int     // width, a multiple of NHead; default 128
	BlockSize int     // context length, the length of every training window; default 128
	Dropout   float64 // default 0
	// ActivationCheckpointing recomputes each block's activations in
	// backward instead of keeping them (models.GPTModel's).
	ActivationCheckpointing bool

	BatchSize   int      // windows per rank per step; default 32
	MaxSteps    int      // optimizer steps, the length of the training; default 1000
	LR          float64  // peak learning rate; default 1e-3
	MinLR       *float64 // the cosine decay's floor; nil means LR/10
	WarmupSteps *int     // linear warm-up from LR/100; nil means 100
	Beta1       *float64 // AdamW β1; nil means 0.9
	Beta2       *float64 // AdamW β2; nil means 0.95
	WeightDecay *float64 // AdamW's, on weight matrices and embeddings only; nil means 0.1
	GradClip    *float64 // max total gradient norm; nil means 1.0, new(0.0) no clipping

	EvalEvery   int      // validation loss every N steps and at the end; default 100
	EvalBatches int      // batches of BatchSize windows the validation loss averages; default 20
	Sample      int      // rank 0 generates this many tokens (bytes for text) at the end (Result.Sample); default 0
	Temperature *float64 // of the sampling softmax; nil means 0.8, new(0.0) the most likely token
	Seed        uint64   // initialisation, shuffling and sampling; default 0

	CommHook string           // DDP gradient reduction: "allreduce" (default), "fp16", "bf16" or "powersgd" (low-rank, tuned by PowerSGD)
	PowerSGD jobflag.PowerSGD // with CommHook "powersgd"

	// Data is a UTF-8 text file to train on byte by byte, or a dataset
	// directory prepared by `gotrain data prepare` (holding index.json),
	// whose token shards are memory-mapped and whose vocabulary sizes the
	// model; "" uses the shipped Go corpus.
	Data string
	// VerifyShards has one rank per host check the sha256 of the train
	// shards its host holds against Data's index at start (a read of
	// them all); without it a shard of the right size counts as present.
	VerifyShards bool
	Init         string // initial weights (safetensors, e.g. written by PyTorch); "" draws them from Seed
}

// withDefaults returns c with its zero (or nil) fields replaced by their
// defaults: the one place they are written.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if p, ok := Presets[c.Preset]; ok {
		def(&c.NLayer, p.NLayer)
		def(&c.NHead, p.NHead)
		def(&c.NEmbd, p.NEmbd)
		def(&c.BlockSize, p.BlockSize)
	}
	def(&c.NLayer, 4)
	def(&c.NHead, 4)
	def(&c.NEmbd, 128)
	def(&c.BlockSize, 128)
	def(&c.BatchSize, 32)
	def(&c.MaxSteps, 1000)
	def(&c.EvalEvery, 100)
	def(&c.EvalBatches, 20)
	if c.LR == 0 {
		c.LR = 1e-3
	}
	opt := func(v **float64, d float64) {
		if *v == nil {
			*v = new(d)
		}
	}
	opt(&c.MinLR, c.LR/10)
	opt(&c.Beta1, 0.9)
	opt(&c.Beta2, 0.95)
	opt(&c.WeightDecay, 0.1)
	opt(&c.GradClip, 1)
	opt(&c.Temperature, 0.8)
	if c.WarmupSteps == nil {
		c.WarmupSteps = new(100)
	}
	return c
}

// check rejects impossible numbers before the job joins a group or
// reads data, with one line naming the field and the value given.
func (c *Config) check() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	for _, o := range []struct {
		name string
		v    *float64
	}{{"MinLR", c.MinLR}, {"WeightDecay", c.WeightDecay}, {"GradClip", c.GradClip}, {"Temperature", c.Temperature}} {
		if o.v != nil && !(*o.v >= 0 && finite(*o.v)) {
			return fmt.Errorf("%s %v: want a finite number >= 0", o.name, *o.v)
		}
	}
	for _, o := range []struct {
		name string
		v    *float64
	}{{"Beta1", c.Beta1}, {"Beta2", c.Beta2}} {
		if o.v != nil && !(*o.v >= 0 && *o.v < 1) {
			return fmt.Errorf("%s %v: want a number >= 0 and below 1", o.name, *o.v)
		}
	}
	if _, ok := Presets[c.Preset]; !ok && c.Preset != "" {
		return fmt.Errorf("Preset %q: want %s", c.Preset, presetNames())
	}
	switch {
	case c.NLayer < 0 || c.NHead < 0 || c.NEmbd < 0 || c.BlockSize < 0:
		return fmt.Errorf("model sizes NLayer %d NHead %d NEmbd %d BlockSize %d: want positive numbers (0 means the default)", c.NLayer, c.NHead, c.NEmbd, c.BlockSize)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("Dropout %v: want 0 <= dropout < 1", c.Dropout)
	case c.BatchSize < 0:
		return fmt.Errorf("BatchSize %d: want at least 1 (0 means 32)", c.BatchSize)
	case c.MaxSteps < 0:
		return fmt.Errorf("MaxSteps %d: want at least 1 (0 means 1000)", c.MaxSteps)
	case c.WarmupSteps != nil && *c.WarmupSteps < 0:
		return fmt.Errorf("WarmupSteps %d: want at least 0", *c.WarmupSteps)
	case c.EvalEvery < 0 || c.EvalBatches < 0:
		return fmt.Errorf("EvalEvery %d, EvalBatches %d: want at least 1 (0 means the default)", c.EvalEvery, c.EvalBatches)
	case c.Sample < 0:
		return fmt.Errorf("Sample %d: want a number of bytes >= 0", c.Sample)
	case c.LR < 0 || !finite(c.LR):
		return fmt.Errorf("LR %v: want a number > 0 (0 means 1e-3)", c.LR)
	case jobflag.CheckCommHook("CommHook", c.CommHook, c.PowerSGD) != nil:
		return jobflag.CheckCommHook("CommHook", c.CommHook, c.PowerSGD)
	}
	if d := c.withDefaults(); d.NEmbd%d.NHead != 0 {
		return fmt.Errorf("NEmbd %d is not a multiple of NHead %d", d.NEmbd, d.NHead)
	}
	return nil
}

// Preset is the shape of a GPT-2 size: nanoGPT's and Hugging Face's
// configurations. The vocabulary is the data's (GPT-2's own is 50257:
// a dataset prepared with --tokenizer gpt2).
type Preset struct {
	NLayer, NHead, NEmbd, BlockSize int
}

// Presets are the GPT-2 sizes Config.Preset names.
var Presets = map[string]Preset{
	"gpt2":        {12, 12, 768, 1024},
	"gpt2-medium": {24, 16, 1024, 1024},
	"gpt2-large":  {36, 20, 1280, 1024},
	"gpt2-xl":     {48, 25, 1600, 1024},
}

// presetNames lists the presets for messages, smallest first.
func presetNames() string { return "gpt2, gpt2-medium, gpt2-large or gpt2-xl" }
