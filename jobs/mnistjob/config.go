package mnistjob

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/progress"
	"github.com/gotrain/gotrain/tensor"
)

// Config is one training run. The zero value of each field means the
// default given in its comment, so Config{} trains the MLP for one epoch
// in this process (or as one rank of the job its environment names).
type Config struct {
	// InitMethod is how this process finds the other ranks: "env://",
	// "tcp://host:port" or "file:///path" (see distributed.Config). ""
	// joins with env:// if WORLD_SIZE names more than one rank (as
	// `gotrain run` and torchrun set it) and otherwise trains alone.
	InitMethod string
	// Rank and WorldSize are this process's place in the job with tcp://
	// and file://; WorldSize 0 takes both from RANK and WORLD_SIZE.
	Rank, WorldSize int

	Model     string  // "mlp" (default) or "cnn"
	Epochs    int     // default 1
	BatchSize int     // per rank; default 64
	Optimizer string  // "sgd", "adadelta", "adam" or "adamw" (weight decay 0.01, PyTorch's default); default sgd for mlp, adadelta for cnn
	LR        float64 // default 0.01 (sgd), 1.0 (adadelta), 0.001 (adam, adamw)
	Momentum  float64 // SGD momentum; negative means 0; default 0.9
	Gamma     float64 // StepLR gamma per epoch; default 0.7 for adadelta, none otherwise; negative disables
	// LRScaling adapts LR to the number of ranks, whose global batch is
	// world × BatchSize: "linear" multiplies it by world (Goyal et al.'s
	// rule, so N ranks train like one), "none" keeps it; "" means linear
	// for SGD and none for the adaptive Adadelta, Adam and AdamW.
	LRScaling string
	CommHook  string // DDP gradient reduction: "allreduce" (default), "fp16" or "bf16"
	// Precision of matmuls and convolutions, training and evaluation:
	// "fp32" (default), "bf16" (tensor.Autocast with a native bf16
	// kernel; refused on CPUs without one) or "bf16-emulated" (the same
	// numerics in software, slower than fp32: for accuracy studies).
	Precision string
	Seed      uint64 // initialisation and shuffling

	DataDir   string // IDX files; "" uses the copy shipped in the binary
	Save      string // rank 0 writes the model here (safetensors) after each epoch, plus a training sidecar
	Resume    bool   // continue from Save's training checkpoint if it exists
	SaveEvery int    // also checkpoint every N steps (0: only at epoch ends)
	MaxSteps  int    // stop after N steps per rank (0: no limit), for benchmarks and tests

	Profile  bool // print a per-step time breakdown (rank 0)
	Progress bool // report progress: a bar per epoch, a line at its end (see package progress)
	// Reporter receives the progress; nil means progress.FromEnv on Out.
	Reporter *progress.Reporter

	// Metrics receives a JSON line per step per rank (see package
	// metrics), Trace the run's timeline; "" for none. Under a launcher
	// that observes the job, the launcher writes them.
	Metrics, Trace string
	MetricsEvery   int // one metrics row per N steps (default 1)

	Out    io.Writer    // progress, per-epoch loss and accuracy, profile; default os.Stderr
	Logger *slog.Logger // default slog.Default()
}

// commHooks are the DDP reductions Config.CommHook names.
var commHooks = map[string]ddp.CommHook{"": ddp.AllReduceHook, "allreduce": ddp.AllReduceHook,
	"fp16": ddp.FP16CompressHook, "bf16": ddp.BF16CompressHook}

// defaultLR is each optimizer's learning rate when Config.LR is 0.
var defaultLR = map[string]float64{"sgd": 0.01, "adadelta": 1.0, "adam": 0.001, "adamw": 0.001}

// resolve validates cfg as the caller gave it (so errors name the values
// passed, not the defaults or a learning rate scaled to the world), fills
// in the defaults and reads the environment (the one place the job does).
func (cfg *Config) resolve() error {
	if err := cfg.validate(); err != nil {
		return err
	}
	cfg.defaults()
	// A malformed variable is refused, never read as "one rank": a job
	// whose WORLD_SIZE is "abc" must not train alone, silently.
	envWorld := cfg.WorldSize == 0 && (cfg.InitMethod == "" || cfg.InitMethod == "env://")
	vars := []string{"LOCAL_WORLD_SIZE"}
	if envWorld {
		vars = append(vars, "RANK", "WORLD_SIZE")
	}
	for _, name := range vars {
		if err := checkEnvInt(name); err != nil {
			return err
		}
	}
	if cfg.InitMethod == "" {
		ws, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
		// Under Slurm, MPI or Kubeflow the world is in the engine's own
		// variables; an engine's incomplete ones must not train alone.
		if e, err := clusterenv.Detect(os.LookupEnv); e.Native() {
			if err != nil {
				return fmt.Errorf("mnistjob: %w", err)
			}
			ws = e.WorldSize
		}
		if ws > 1 {
			cfg.InitMethod = "env://"
		}
	}
	return nil
}

// checkEnvInt refuses an environment variable that is set but not a
// non-negative integer, naming it; unset or empty passes.
func checkEnvInt(name string) error {
	s := os.Getenv(name)
	if s == "" {
		return nil
	}
	if n, err := strconv.Atoi(s); err != nil || n < 0 {
		return fmt.Errorf("mnistjob: environment variable %s=%q: want a non-negative integer", name, s)
	}
	return nil
}

func (cfg *Config) defaults() {
	if cfg.Model == "" {
		cfg.Model = "mlp"
	}
	if cfg.Epochs == 0 {
		cfg.Epochs = 1
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 64
	}
	if cfg.Optimizer == "" {
		cfg.Optimizer = "sgd"
		if cfg.Model == "cnn" {
			cfg.Optimizer = "adadelta"
		}
	}
	if cfg.LR == 0 {
		cfg.LR = defaultLR[cfg.Optimizer]
	}
	if cfg.Momentum == 0 {
		cfg.Momentum = 0.9
	} else if cfg.Momentum < 0 {
		cfg.Momentum = 0
	}
	if cfg.Gamma == 0 && cfg.Optimizer == "adadelta" {
		cfg.Gamma = 0.7
	}
	if cfg.Out == nil {
		cfg.Out = os.Stderr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
}

// validate rejects unknown choices and impossible numbers before the job
// joins a process group or loads data, so a typo fails at once, on every
// rank, with one line naming the field and the value it was given (zero
// values, the defaults, pass).
func (cfg *Config) validate() error {
	var err error
	switch {
	case cfg.Model != "" && cfg.Model != "mlp" && cfg.Model != "cnn":
		err = fmt.Errorf("Model %q: want mlp or cnn", cfg.Model)
	case cfg.Optimizer != "" && defaultLR[cfg.Optimizer] == 0:
		err = fmt.Errorf("Optimizer %q: want sgd, adadelta, adam or adamw", cfg.Optimizer)
	case commHooks[cfg.CommHook] == nil:
		err = fmt.Errorf("CommHook %q: want allreduce, fp16 or bf16", cfg.CommHook)
	case cfg.Precision != "" && cfg.Precision != "fp32" && cfg.Precision != "bf16" && cfg.Precision != "bf16-emulated":
		err = fmt.Errorf("Precision %q: want fp32, bf16 or bf16-emulated", cfg.Precision)
	case cfg.Precision == "bf16" && tensor.CheckPrecision(tensor.BF16) != nil:
		err = fmt.Errorf("Precision bf16: %w", tensor.CheckPrecision(tensor.BF16))
	case cfg.LRScaling != "" && cfg.LRScaling != "linear" && cfg.LRScaling != "none":
		err = fmt.Errorf("LRScaling %q: want linear or none", cfg.LRScaling)
	case cfg.Epochs < 0:
		err = fmt.Errorf("Epochs %d: want at least 1 (0 means 1)", cfg.Epochs)
	case cfg.BatchSize < 0:
		err = fmt.Errorf("BatchSize %d: want at least 1 (0 means 64)", cfg.BatchSize)
	case cfg.SaveEvery < 0:
		err = fmt.Errorf("SaveEvery %d: want at least 1 (0 means at epoch ends only)", cfg.SaveEvery)
	case cfg.MetricsEvery < 0:
		err = fmt.Errorf("MetricsEvery %d: want at least 1 (0 means 1)", cfg.MetricsEvery)
	case cfg.MaxSteps < 0:
		err = fmt.Errorf("MaxSteps %d: want at least 1 (0 means no limit)", cfg.MaxSteps)
	case cfg.LR < 0 || math.IsNaN(cfg.LR) || math.IsInf(cfg.LR, 0):
		err = fmt.Errorf("LR %v: want a number > 0 (0 means the optimizer's default)", cfg.LR)
	case math.IsNaN(cfg.Momentum) || math.IsInf(cfg.Momentum, 0):
		err = fmt.Errorf("Momentum %v: want a finite number (negative means none)", cfg.Momentum)
	case math.IsNaN(cfg.Gamma) || math.IsInf(cfg.Gamma, 0):
		err = fmt.Errorf("Gamma %v: want a finite number (negative means no decay)", cfg.Gamma)
	case cfg.Rank < 0 || cfg.WorldSize < 0 || cfg.WorldSize > 0 && cfg.Rank >= cfg.WorldSize:
		err = fmt.Errorf("Rank %d of WorldSize %d: want 0 <= rank < world size", cfg.Rank, cfg.WorldSize)
	case cfg.Resume && cfg.Save == "":
		err = errors.New("Resume needs Save, the checkpoint to resume from")
	case cfg.SaveEvery > 0 && cfg.Save == "":
		err = fmt.Errorf("SaveEvery %d needs Save, where to checkpoint", cfg.SaveEvery)
	}
	if err != nil {
		return fmt.Errorf("mnistjob: %w", err)
	}
	return nil
}

// scaledLR is the learning rate for world ranks (see Config.LRScaling).
func scaledLR(cfg Config, world int) float64 {
	if cfg.LRScaling == "linear" || cfg.LRScaling == "" && cfg.Optimizer == "sgd" {
		return cfg.LR * float64(world)
	}
	return cfg.LR
}
