package harness

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/tensor"
)

// Config is how a training program runs, rather than what it trains: how
// it finds the other ranks, where it checkpoints, the precision of its
// matmuls, and what it reports and where. The zero Config trains in this
// process alone (or as one rank of the job its environment names), in
// float32, with no checkpoint, no progress bar and no metrics, printing
// its lines and log records on standard error; each field's comment says
// what its zero value means.
//
// A job's own Config embeds it, so that one command line or one
// struct literal sets both:
//
//	type Config struct {
//		harness.Config
//		Epochs int // default 1
//	}
type Config struct {
	// InitMethod is how this process finds the other ranks: "env://",
	// "tcp://host:port" or "file:///path" (see distributed.Config). ""
	// joins with env:// if the environment names more than one rank
	// (WORLD_SIZE, as `gotrain run` and torchrun set it, or the variables
	// of Slurm, MPI or Kubeflow) and otherwise trains alone.
	InitMethod string
	// Rank and WorldSize are this process's place in the job with tcp://
	// and file://; WorldSize 0 takes both from the environment.
	Rank, WorldSize int

	// Save is where rank 0 writes the model (safetensors, loadable by
	// PyTorch) with a training checkpoint beside it (see
	// checkpoint.SaveTraining): at the end of every epoch and of the run,
	// and every SaveEvery steps. "" saves nothing.
	// With Sharding the training checkpoint is instead a sharded one in
	// ShardedDir(Save), each rank writing its shards (see
	// checkpoint.SaveSharded), and the model is gathered and written to
	// Save when Train ends (`gotrain checkpoint consolidate` makes one of
	// any sharded checkpoint). Resume loads the newer of the two kinds,
	// a sharded one also into a DDP run and at another world size.
	Save string
	// Resume continues from Save's training checkpoint if rank 0 has one;
	// it needs Save.
	Resume bool
	// SaveEvery also checkpoints every this many steps; 0 only at the
	// ends of epochs and of the run. It needs Save.
	SaveEvery int

	// Precision is the number format of the matmuls and convolutions
	// that Run.Autocast runs, in training and evaluation: "fp32" (or "",
	// the default), "bf16" (tensor.Autocast on a native bf16 kernel,
	// refused on a CPU without one) or "bf16-emulated" (the same numerics
	// rounded in software, slower than fp32: for accuracy studies).
	Precision string

	// Sharding shards the model's training state over the ranks (see
	// package ddp/fsdp and Run.Wrap): "zero1" (the optimizer state),
	// "zero2" (and the gradients), "full" (and the parameters) or
	// "hybrid" (full within a node, replicated across nodes). "" or
	// "none" trains with DDP. Checkpoints are then sharded (see
	// ShardedDir).
	Sharding string

	// LocalSGD, if set, trains each rank's replica on its own and
	// averages the parameters every LocalSGD steps (ddp/localsgd);
	// DiLoCo, if set, syncs every DiLoCo steps with DiLoCo's outer
	// optimizer instead. Neither goes with Sharding or with the other.
	LocalSGD, DiLoCo int
	// DiLoCoOuterLR and DiLoCoOuterMomentum are DiLoCo's outer SGD's
	// learning rate and Nesterov momentum; nil means the paper's 0.7 and
	// 0.9.
	DiLoCoOuterLR, DiLoCoOuterMomentum *float64
	// DiLoCoFragments syncs the parameters in this many staggered
	// fragments (streaming DiLoCo; also allowed with LocalSGD); 0 means 1.
	DiLoCoFragments int
	// DiLoCoBF16 sends DiLoCo's outer gradients as bfloat16.
	DiLoCoBF16 bool
	// DiLoCoDelay overlaps a fragment's reduction with this many inner
	// steps; 0 applies it at once.
	DiLoCoDelay int

	// Progress reports progress (see package progress): a bar per epoch,
	// or per evaluation interval, and a line at its end; on a terminal
	// alone, or as events to the launcher. false prints only rank 0's
	// line at each evaluation.
	Progress bool
	// LogEvery is the period of the plain progress lines written when
	// Out is not a terminal; 0 means package progress's default.
	LogEvery time.Duration
	// Metrics receives a JSON line per step per rank (see package
	// metrics), Trace the run's timeline; "" for none. Under a launcher
	// that observes the job, the launcher writes them.
	Metrics, Trace string
	// MetricsEvery writes one metrics row per this many steps; 0 means 1.
	MetricsEvery int
	// Profile has rank 0 print the mean time per step in each phase
	// (see Profile) when training ends.
	Profile bool

	// OnNaN is what a step whose loss or gradient norm is NaN or
	// infinite does (see Step.Update): OnNaNStop ("stop", or "", the
	// default) ends Train with a *NonFiniteError; OnNaNSkip ("skip") drops
	// the step's update on every rank and trains on, at the cost of one
	// small allreduce a step; OnNaNWarn ("warn") trains on. The first
	// such step is logged, and the summary counts them (nan_steps,
	// skipped_steps).
	OnNaN string

	// FT trains fault-tolerant (ddp/ft), under `gotrain run --ft`: each
	// step forms a quorum of the live replicas, a replica that dies
	// costs at most the step in flight, and a restarted one heals from a
	// live peer (see Run.Train). The launcher's environment gives the
	// replica its place; there is no process group and no DDP wrapper.
	// With LocalSGD or DiLoCo the quorum is taken at each outer step
	// instead (DiLoCoDelay must be 0).
	FT bool
	// MinReplicas is the fewest replicas an FT run trains with; 0 takes
	// the launcher's (--min-replicas, default 1).
	MinReplicas int

	// Out receives the run's lines: progress, evaluations, the profile
	// and, with a nil Logger, the log. nil means os.Stderr.
	Out io.Writer
	// Summary receives rank 0's summary line when the run ends (see
	// Run.Report); nil prints none.
	Summary io.Writer
	// Logger receives the run's log records. nil means records in the
	// format GOTRAIN_LOG_FORMAT names (text by default) carrying the
	// rank, written to Out above the progress display.
	Logger *slog.Logger
}

// Harness returns c. A job's Config that embeds a Config has this method
// too, through which a command line fills the settings every job shares.
func (c *Config) Harness() *Config { return c }

// The values of Config.Precision.
const (
	FP32         = "fp32"
	BF16         = "bf16"
	BF16Emulated = "bf16-emulated"
)

// resolve checks c as the caller gave it, so that errors name the values
// passed, fills in its defaults and reads the environment: the one place
// the harness does.
func (c *Config) resolve() error {
	if err := c.check(); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if c.Precision == "" {
		c.Precision = FP32
	}
	if c.MetricsEvery == 0 {
		c.MetricsEvery = 1
	}
	if c.Out == nil {
		c.Out = os.Stderr
	}
	// A malformed variable is refused, never read as "one rank": a job
	// whose WORLD_SIZE is "abc" must not train alone, silently.
	vars := []string{"LOCAL_WORLD_SIZE"}
	if c.WorldSize == 0 && (c.InitMethod == "" || c.InitMethod == "env://") {
		vars = append(vars, "RANK", "WORLD_SIZE")
	}
	for _, name := range vars {
		if s := os.Getenv(name); s != "" {
			if n, err := strconv.Atoi(s); err != nil || n < 0 {
				return fmt.Errorf("harness: environment variable %s=%q: want a non-negative integer", name, s)
			}
		}
	}
	if c.InitMethod == "" {
		ws, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
		// Under Slurm, MPI or Kubeflow the world is in the engine's own
		// variables; an engine's incomplete ones must not train alone.
		if e, err := clusterenv.Detect(os.LookupEnv); e.Native() {
			if err != nil {
				return fmt.Errorf("harness: %w", err)
			}
			ws = e.WorldSize
		}
		if ws > 1 {
			c.InitMethod = "env://"
		}
	}
	return nil
}

// check refuses impossible values before the run joins a group, naming
// the field and the value it was given.
func (c *Config) check() error {
	if err := c.checkFT(); err != nil {
		return err
	}
	switch {
	case c.Rank < 0 || c.WorldSize < 0 || c.WorldSize > 0 && c.Rank >= c.WorldSize:
		return fmt.Errorf("Rank %d of WorldSize %d: want 0 <= rank < world size", c.Rank, c.WorldSize)
	case c.SaveEvery < 0:
		return fmt.Errorf("SaveEvery %d: want at least 1 (0 means at the ends of epochs and of the run only)", c.SaveEvery)
	case c.MetricsEvery < 0:
		return fmt.Errorf("MetricsEvery %d: want at least 1 (0 means 1)", c.MetricsEvery)
	case c.LogEvery < 0:
		return fmt.Errorf("LogEvery %v: want a positive duration (0 means the default)", c.LogEvery)
	case c.Resume && c.Save == "":
		return errors.New("Resume needs Save, the checkpoint to resume from")
	case c.SaveEvery > 0 && c.Save == "":
		return fmt.Errorf("SaveEvery %d needs Save, where to checkpoint", c.SaveEvery)
	case c.LocalSGD < 0 || c.DiLoCo < 0:
		return fmt.Errorf("LocalSGD %d, DiLoCo %d: want at least 1 (0 for none)", c.LocalSGD, c.DiLoCo)
	case c.LocalSGD > 0 && c.DiLoCo > 0:
		return fmt.Errorf("LocalSGD %d and DiLoCo %d: choose one", c.LocalSGD, c.DiLoCo)
	case c.syncEvery() > 0 && c.sharded():
		return fmt.Errorf("Sharding %q with LocalSGD or DiLoCo: a local-SGD replica holds the whole model; choose one", c.Sharding)
	case c.DiLoCo == 0 && (c.DiLoCoOuterLR != nil || c.DiLoCoOuterMomentum != nil || c.DiLoCoBF16 || c.DiLoCoDelay != 0):
		return errors.New("DiLoCoOuterLR, DiLoCoOuterMomentum, DiLoCoBF16 and DiLoCoDelay need DiLoCo")
	case c.DiLoCoFragments != 0 && c.syncEvery() == 0:
		return fmt.Errorf("DiLoCoFragments %d needs DiLoCo or LocalSGD", c.DiLoCoFragments)
	case c.DiLoCoOuterLR != nil && !(*c.DiLoCoOuterLR > 0):
		return fmt.Errorf("DiLoCoOuterLR %v: want a positive learning rate", *c.DiLoCoOuterLR)
	case c.DiLoCoOuterMomentum != nil && !(*c.DiLoCoOuterMomentum >= 0 && *c.DiLoCoOuterMomentum < 1):
		return fmt.Errorf("DiLoCoOuterMomentum %v: want at least 0 and below 1", *c.DiLoCoOuterMomentum)
	case c.DiLoCoFragments < 0 || c.DiLoCoDelay < 0:
		return fmt.Errorf("DiLoCoFragments %d, DiLoCoDelay %d: want at least 0", c.DiLoCoFragments, c.DiLoCoDelay)
	case c.OnNaN != "" && c.OnNaN != OnNaNStop && c.OnNaN != OnNaNSkip && c.OnNaN != OnNaNWarn:
		return fmt.Errorf("OnNaN %q: want stop, skip or warn", c.OnNaN)
	}
	if err := checkSharding(c.Sharding); err != nil {
		return err
	}
	return checkPrecision(c.Precision)
}

// checkPrecision returns an error unless p is a Config.Precision this
// process can run: bf16 needs a native bf16 kernel (it is refused, not
// silently emulated, since emulation is slower than fp32; bf16-emulated
// asks for it).
func checkPrecision(p string) error {
	switch p {
	case "", FP32, BF16Emulated:
		return nil
	case BF16:
		if err := tensor.CheckPrecision(tensor.BF16); err != nil {
			return fmt.Errorf("Precision bf16: %w", err)
		}
		return nil
	}
	return fmt.Errorf("Precision %q: want fp32, bf16 or bf16-emulated", p)
}
