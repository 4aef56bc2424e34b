package gptjob

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"

	"github.com/gotrain/gotrain/progress"
	"github.com/gotrain/gotrain/tensor"
)

// Config is one training run. The zero value of each field means the
// default in its comment, so Config{} trains the default GPT on the
// shipped corpus in this process (or as one rank of the job its
// environment names).
type Config struct {
	// InitMethod is how this process finds the other ranks: "env://",
	// "tcp://host:port" or "file:///path" (see distributed.Config). ""
	// joins with env:// if WORLD_SIZE names more than one rank (as
	// `gotrain run` and torchrun set it) and otherwise trains alone.
	InitMethod string
	// Rank and WorldSize are this process's place in the job with tcp://
	// and file://; WorldSize 0 takes both from RANK and WORLD_SIZE.
	Rank, WorldSize int

	NLayer    int     // transformer blocks; default 4
	NHead     int     // attention heads; default 4
	NEmbd     int     // width, a multiple of NHead; default 128
	BlockSize int     // context length, the length of every training window; default 128
	Dropout   float64 // default 0

	BatchSize   int     // windows per rank per step; default 32
	MaxSteps    int     // optimizer steps; default 1000
	LR          float64 // peak learning rate; default 1e-3
	MinLR       float64 // the cosine decay's floor; default LR/10; negative means 0
	WarmupSteps int     // linear warm-up from LR/100; default 100; negative means none
	Beta1       float64 // AdamW β1; default 0.9; negative means 0
	Beta2       float64 // AdamW β2; default 0.95; negative means 0
	WeightDecay float64 // on weight matrices only; default 0.1; negative means 0
	GradClip    float64 // max total gradient norm; default 1.0; negative means no clipping
	// Precision of the matmuls (every Linear, the lm_head included, and
	// attention's q, k and v), training, evaluation and sampling: "fp32"
	// (default), "bf16" (tensor.Autocast on a native bf16 kernel; refused
	// on CPUs without one) or "bf16-emulated" (the same numerics in
	// software, slower than fp32: for accuracy studies). Embeddings,
	// LayerNorm, softmax, GELU and the loss stay float32, and so do the
	// master weights and AdamW's moments.
	Precision string

	EvalEvery   int     // validation loss every N steps and at the end; default 100
	EvalBatches int     // batches of BatchSize windows the validation loss averages; default 20
	Sample      int     // rank 0 generates this many bytes at the end (Result.Sample); default 0
	Temperature float64 // of the sampling softmax; default 0.8; negative means greedy
	Seed        uint64  // initialisation, shuffling and sampling; default 0

	Data      string // UTF-8 text file to train on; "" uses the shipped Go corpus
	Init      string // initial weights (safetensors, e.g. written by PyTorch); "" draws them from Seed
	Save      string // rank 0 writes the model here (safetensors) at the end, plus a training sidecar
	Resume    bool   // continue from Save's training checkpoint if it exists
	SaveEvery int    // also checkpoint every N steps (0: only at the end)

	Progress bool // report progress (see package progress), in tokens
	// Reporter receives the progress; nil means progress.FromEnv on Out.
	Reporter *progress.Reporter

	// Metrics receives a JSON line per step per rank (see package
	// metrics; a row's samples are the step's tokens), Trace the run's
	// timeline; "" for none. Under a launcher that observes the job, the
	// launcher writes them.
	Metrics, Trace string
	MetricsEvery   int // one metrics row per N steps (default 1)

	Out    io.Writer    // progress, evaluations, the sample; default os.Stderr
	Logger *slog.Logger // default slog.Default()
}

// resolve validates cfg as the caller gave it, fills in the defaults and
// reads the environment.
func (cfg *Config) resolve() error {
	if err := cfg.validate(); err != nil {
		return err
	}
	cfg.defaults()
	if cfg.NEmbd%cfg.NHead != 0 {
		return fmt.Errorf("gptjob: NEmbd %d is not a multiple of NHead %d", cfg.NEmbd, cfg.NHead)
	}
	envWorld := cfg.WorldSize == 0 && (cfg.InitMethod == "" || cfg.InitMethod == "env://")
	vars := []string{"LOCAL_WORLD_SIZE"}
	if envWorld {
		vars = append(vars, "RANK", "WORLD_SIZE")
	}
	for _, name := range vars {
		// A malformed variable is refused, never read as "one rank".
		if s := os.Getenv(name); s != "" {
			if n, err := strconv.Atoi(s); err != nil || n < 0 {
				return fmt.Errorf("gptjob: environment variable %s=%q: want a non-negative integer", name, s)
			}
		}
	}
	if cfg.InitMethod == "" {
		if ws, _ := strconv.Atoi(os.Getenv("WORLD_SIZE")); ws > 1 {
			cfg.InitMethod = "env://"
		}
	}
	return nil
}

func (cfg *Config) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.NLayer, 4)
	def(&cfg.NHead, 4)
	def(&cfg.NEmbd, 128)
	def(&cfg.BlockSize, 128)
	def(&cfg.BatchSize, 32)
	def(&cfg.MaxSteps, 1000)
	def(&cfg.WarmupSteps, 100)
	def(&cfg.EvalEvery, 100)
	def(&cfg.EvalBatches, 20)
	if cfg.WarmupSteps < 0 {
		cfg.WarmupSteps = 0
	}
	deff := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		} else if *v < 0 {
			*v = 0
		}
	}
	deff(&cfg.LR, 1e-3)
	deff(&cfg.MinLR, cfg.LR/10)
	deff(&cfg.Beta1, 0.9)
	deff(&cfg.Beta2, 0.95)
	deff(&cfg.WeightDecay, 0.1)
	deff(&cfg.Temperature, 0.8)
	if cfg.GradClip == 0 {
		cfg.GradClip = 1
	}
	if cfg.Precision == "" {
		cfg.Precision = "fp32"
	}
	if cfg.Out == nil {
		cfg.Out = os.Stderr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
}

// validate rejects impossible numbers before the job joins a group or
// reads data, with one line naming the field and the value given.
func (cfg *Config) validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	var err error
	switch {
	case cfg.NLayer < 0 || cfg.NHead < 0 || cfg.NEmbd < 0 || cfg.BlockSize < 0:
		err = fmt.Errorf("model sizes NLayer %d NHead %d NEmbd %d BlockSize %d: want positive numbers (0 means the default)", cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize)
	case !(cfg.Dropout >= 0 && cfg.Dropout < 1):
		err = fmt.Errorf("Dropout %v: want 0 <= dropout < 1", cfg.Dropout)
	case cfg.BatchSize < 0:
		err = fmt.Errorf("BatchSize %d: want at least 1 (0 means 32)", cfg.BatchSize)
	case cfg.MaxSteps < 0:
		err = fmt.Errorf("MaxSteps %d: want at least 1 (0 means 1000)", cfg.MaxSteps)
	case cfg.EvalEvery < 0 || cfg.EvalBatches < 0:
		err = fmt.Errorf("EvalEvery %d, EvalBatches %d: want at least 1 (0 means the default)", cfg.EvalEvery, cfg.EvalBatches)
	case cfg.Sample < 0:
		err = fmt.Errorf("Sample %d: want a number of bytes >= 0", cfg.Sample)
	case cfg.SaveEvery < 0:
		err = fmt.Errorf("SaveEvery %d: want at least 1 (0 means at the end only)", cfg.SaveEvery)
	case cfg.MetricsEvery < 0:
		err = fmt.Errorf("MetricsEvery %d: want at least 1 (0 means 1)", cfg.MetricsEvery)
	case cfg.LR < 0 || !finite(cfg.LR):
		err = fmt.Errorf("LR %v: want a number > 0 (0 means 1e-3)", cfg.LR)
	case !finite(cfg.MinLR) || !finite(cfg.WeightDecay) || !finite(cfg.GradClip) || !finite(cfg.Temperature):
		err = fmt.Errorf("MinLR %v, WeightDecay %v, GradClip %v, Temperature %v: want finite numbers", cfg.MinLR, cfg.WeightDecay, cfg.GradClip, cfg.Temperature)
	case !(cfg.Beta1 < 1 && cfg.Beta2 < 1) || !finite(cfg.Beta1) || !finite(cfg.Beta2):
		err = fmt.Errorf("Beta1 %v, Beta2 %v: want numbers below 1", cfg.Beta1, cfg.Beta2)
	case cfg.Precision != "" && cfg.Precision != "fp32" && cfg.Precision != "bf16" && cfg.Precision != "bf16-emulated":
		err = fmt.Errorf("Precision %q: want fp32, bf16 or bf16-emulated", cfg.Precision)
	case cfg.Precision == "bf16" && tensor.CheckPrecision(tensor.BF16) != nil:
		err = fmt.Errorf("Precision bf16: %w", tensor.CheckPrecision(tensor.BF16))
	case cfg.Rank < 0 || cfg.WorldSize < 0 || cfg.WorldSize > 0 && cfg.Rank >= cfg.WorldSize:
		err = fmt.Errorf("Rank %d of WorldSize %d: want 0 <= rank < world size", cfg.Rank, cfg.WorldSize)
	case cfg.Resume && cfg.Save == "":
		err = errors.New("Resume needs Save, the checkpoint to resume from")
	case cfg.SaveEvery > 0 && cfg.Save == "":
		err = fmt.Errorf("SaveEvery %d needs Save, where to checkpoint", cfg.SaveEvery)
	}
	if err != nil {
		return fmt.Errorf("gptjob: %w", err)
	}
	return nil
}
