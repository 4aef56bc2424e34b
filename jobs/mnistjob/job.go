// Package mnistjob is the built-in demo job behind `gotrain train mnist`:
// the seed's DDP training loop (process group, DDP, DistributedSampler,
// optimizer, rank-0 checkpoint) with a progress bar, test accuracy after
// each epoch, resume and a per-step profile.
package mnistjob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/datasets/mnist"
	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// Config is one training run. The zero value of each field means the
// default given in its comment.
type Config struct {
	Model     string  // "mlp" (default) or "cnn"
	Epochs    int     // default 1
	BatchSize int     // per rank; default 64
	Optimizer string  // "sgd", "adadelta" or "adam"; default sgd for mlp, adadelta for cnn
	LR        float64 // default 0.01 (sgd), 1.0 (adadelta), 0.001 (adam)
	Momentum  float64 // SGD momentum; negative means 0; default 0.9
	Gamma     float64 // StepLR gamma per epoch; default 0.7 for adadelta, none otherwise; negative disables
	Seed      uint64  // initialisation and shuffling
	DataDir   string  // IDX files; "" uses the copy shipped in the binary
	Save      string  // rank 0 writes the model here (safetensors) after each epoch, plus a training sidecar
	Resume    bool    // continue from Save's training checkpoint if it exists
	SaveEvery int     // also checkpoint every N steps (0: only at epoch ends)
	MaxSteps  int     // stop after N steps per rank (0: no limit), for benchmarks
	Profile   bool    // print a per-step time breakdown
	Progress  bool    // show a progress bar (rank 0)
	CommHook  string  // DDP gradient reduction: "allreduce" (default), "fp16" or "bf16"
	// LRScaling adapts LR to the number of ranks, whose global batch is
	// world × BatchSize: "linear" multiplies it by world (Goyal et al.'s
	// rule, so N ranks train like one), "none" keeps it; "" means linear
	// for SGD and none for the adaptive Adadelta and Adam.
	LRScaling string

	Out    io.Writer // progress and results; default os.Stderr
	Logger *slog.Logger
}

// Result summarises a run (rank 0's view).
type Result struct {
	Model         string
	World         int
	Epochs        int
	Steps         int
	SamplesPerSec float64 // all ranks, over the steps after the first 5
	TestAccuracy  float64
	PeakRSSMiB    float64
	Profile       Profile
}

// Summary is the `key=value` line the CLI prints last.
func (r Result) Summary() string {
	return fmt.Sprintf("model=%s world=%d epochs=%d steps=%d samples_per_s=%.0f test_acc=%.4f peak_rss_mib=%.0f",
		r.Model, r.World, r.Epochs, r.Steps, r.SamplesPerSec, r.TestAccuracy, r.PeakRSSMiB)
}

// Profile is the mean time per step spent in each phase.
type Profile struct {
	Data, Forward, Backward, ExposedAllReduce, Optimizer time.Duration
	// AllReduce is the whole time spent reducing gradients, hidden by
	// backward or not.
	AllReduce time.Duration
}

func (p Profile) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }
	return fmt.Sprintf("profile per step: data_ms=%s forward_ms=%s backward_ms=%s (of which exposed_allreduce_wait_ms=%s) optimizer_ms=%s allreduce_total_ms=%s",
		ms(p.Data), ms(p.Forward), ms(p.Backward), ms(p.ExposedAllReduce), ms(p.Optimizer), ms(p.AllReduce))
}

// resumeState is what the training sidecar carries besides model and
// optimizer.
type resumeState struct {
	Sampler data.SamplerState `json:"sampler"`
}

// warmupSteps are excluded from samples/s, as in the PyTorch anchor.
const warmupSteps = 5

// Run trains on this process's share of MNIST. If the environment names a
// world of more than one rank (WORLD_SIZE, as `gotrain run` sets it), it
// joins the process group with env:// and wraps the model in DDP.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	log := cfg.Logger
	world, rank := 1, 0
	var pg *distributed.Group
	if ws, _ := strconv.Atoi(os.Getenv("WORLD_SIZE")); ws > 1 {
		var err error
		pg, err = distributed.Init(ctx, distributed.Config{InitMethod: "env://"})
		if err != nil {
			return Result{}, fmt.Errorf("mnistjob: joining the process group: %w", err)
		}
		defer pg.Destroy()
		world, rank = pg.Size(), pg.Rank()
	}
	cfg.LR = scaledLR(cfg, world)

	nn.SetSeed(cfg.Seed)
	var model nn.Module
	switch cfg.Model {
	case "mlp":
		model = models.MLP()
	case "cnn":
		model = models.MNISTNet()
	default:
		return Result{}, fmt.Errorf("mnistjob: unknown model %q (want mlp or cnn)", cfg.Model)
	}
	forward := model.Forward
	params := nn.Parameters(model)
	var dm *ddp.Model
	if pg != nil {
		var err error
		dm, err = ddp.New(ctx, model, pg, ddp.GradientAsBucketView(true), ddp.WithCommHook(commHooks[cfg.CommHook]))
		if err != nil {
			return Result{}, err
		}
		defer dm.Close()
		forward, params = dm.Forward, dm.Parameters()
	}

	norm := mnist.Normalize(0.1307, 0.3081)
	train, test, err := loadData(cfg.DataDir, norm)
	if err != nil {
		return Result{}, err
	}
	sampler := data.NewDistributedSampler(train.Len(), world, rank, data.Seed(cfg.Seed))
	loader := data.NewLoader(train, cfg.BatchSize, sampler)

	opt, sched, err := newOptimizer(cfg, params)
	if err != nil {
		return Result{}, err
	}

	st := checkpoint.TrainingState{Model: model, Optimizer: opt, Scheduler: sched}
	var extra resumeState
	startEpoch := 0
	if cfg.Resume && cfg.Save != "" {
		st.Extra = &extra
		switch err := checkpoint.LoadTraining(cfg.Save, &st); {
		case err == nil:
			startEpoch = st.Epoch
			if err := sampler.Restore(extra.Sampler); err != nil {
				return Result{}, fmt.Errorf("mnistjob: resuming the sampler from %s: %w", cfg.Save, err)
			}
			log.Info("resumed", "checkpoint", cfg.Save, "epoch", st.Epoch, "step", st.Step, "rank", rank)
		case errors.Is(err, fs.ErrNotExist):
			log.Info("no checkpoint to resume from; starting fresh", "checkpoint", cfg.Save)
		default:
			return Result{}, err
		}
	}
	save := func(epoch int, step int64) error {
		if rank != 0 || cfg.Save == "" {
			return nil
		}
		extra.Sampler = sampler.State()
		st.Epoch, st.Step, st.Extra = epoch, step, &extra
		return checkpoint.SaveTraining(cfg.Save, st)
	}

	res := Result{Model: cfg.Model, World: world}
	var prof Profile
	var counted, profiled int
	// counting is the training time since step warmupSteps, excluding
	// evaluation and checkpoints (as the PyTorch anchor stops its clock
	// before evaluating).
	var counting time.Duration
	var countStart time.Time
	step := st.Step
	stepsThisRun := 0
	nn.SetTrain(model, true)
	for epoch := startEpoch; epoch < cfg.Epochs; epoch++ {
		if sampler.Epoch() != epoch || sampler.State().Seen == 0 {
			sampler.SetEpoch(epoch)
		}
		var bar *progressbar.ProgressBar
		if rank == 0 && cfg.Progress {
			bar = progressbar.NewOptions(loader.Len(),
				progressbar.OptionSetWriter(cfg.Out),
				progressbar.OptionSetDescription(fmt.Sprintf("epoch %d/%d", epoch+1, cfg.Epochs)),
				progressbar.OptionThrottle(200*time.Millisecond),
				progressbar.OptionShowCount(),
				progressbar.OptionClearOnFinish())
		}
		if stepsThisRun >= warmupSteps {
			countStart = time.Now()
		}
		epochStart := time.Now()
		epochSamples := 0
		tData := time.Now()
		stopped := false
		for b := range loader.Batches() {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if stepsThisRun == warmupSteps {
				if pg != nil {
					if err := pg.Barrier(ctx); err != nil {
						return res, err
					}
				}
				countStart, counted, counting = time.Now(), 0, 0
				prof, profiled = Profile{}, 0
			}
			t0 := time.Now()
			opt.ZeroGrad()
			loss := nn.CrossEntropy(forward(b.X), b.Y)
			t1 := time.Now()
			var before ddp.Stats
			if dm != nil {
				before = dm.Stats()
			}
			if err := loss.Backward(); err != nil {
				return res, err
			}
			t2 := time.Now()
			opt.Step()
			t3 := time.Now()
			prof.Data += t0.Sub(tData)
			prof.Forward += t1.Sub(t0)
			prof.Backward += t2.Sub(t1)
			if dm != nil {
				after := dm.Stats()
				prof.ExposedAllReduce += after.ExposedWait - before.ExposedWait
				prof.AllReduce += after.Reducing - before.Reducing
			}
			prof.Optimizer += t3.Sub(t2)
			profiled++
			step++
			stepsThisRun++
			counted += len(b.Y)
			epochSamples += len(b.Y)
			if bar != nil {
				rate := float64(epochSamples*world) / time.Since(epochStart).Seconds()
				bar.Describe(fmt.Sprintf("epoch %d/%d loss %.4f %.0f samples/s", epoch+1, cfg.Epochs, loss.Item(), rate))
				bar.Add(1)
			}
			if cfg.SaveEvery > 0 && step%int64(cfg.SaveEvery) == 0 {
				paused := time.Now()
				if err := save(epoch, step); err != nil {
					return res, err
				}
				if !countStart.IsZero() {
					countStart = countStart.Add(time.Since(paused))
				}
			}
			if cfg.MaxSteps > 0 && stepsThisRun >= cfg.MaxSteps {
				stopped = true
				break
			}
			tData = time.Now()
		}
		if pg != nil && !countStart.IsZero() {
			// All ranks' work for the epoch is done once the slowest is.
			if err := pg.Barrier(ctx); err != nil {
				return res, err
			}
		}
		if !countStart.IsZero() {
			counting += time.Since(countStart)
			countStart = time.Time{}
		}
		if bar != nil {
			bar.Finish()
		}
		if sched != nil {
			sched.Step()
		}
		res.Epochs = epoch + 1
		if rank == 0 {
			res.TestAccuracy = evaluate(model, test)
			fmt.Fprintf(cfg.Out, "epoch %d: test_acc=%.4f\n", epoch+1, res.TestAccuracy)
			nn.SetTrain(model, true)
		}
		nextEpoch := epoch + 1
		if stopped {
			nextEpoch = epoch
		}
		if err := save(nextEpoch, step); err != nil {
			return res, err
		}
		if stopped {
			break
		}
	}
	if counting > 0 {
		res.SamplesPerSec = float64(counted*world) / counting.Seconds()
	}
	res.Steps = stepsThisRun
	if profiled > 0 {
		n := time.Duration(profiled)
		res.Profile = Profile{prof.Data / n, prof.Forward / n, prof.Backward / n, prof.ExposedAllReduce / n, prof.Optimizer / n, prof.AllReduce / n}
	}
	res.PeakRSSMiB = peakRSSMiB()
	if cfg.Profile && rank == 0 {
		fmt.Fprintln(cfg.Out, res.Profile)
	}
	return res, nil
}

// commHooks are the DDP reductions --comm-hook names.
var commHooks = map[string]ddp.CommHook{"": ddp.AllReduceHook, "allreduce": ddp.AllReduceHook,
	"fp16": ddp.FP16CompressHook, "bf16": ddp.BF16CompressHook}

// validate rejects unknown choices before the job joins a process group or
// loads data, so a typo fails at once on every rank.
func (cfg *Config) validate() error {
	switch {
	case cfg.Model != "mlp" && cfg.Model != "cnn":
		return fmt.Errorf("mnistjob: unknown model %q (want mlp or cnn)", cfg.Model)
	case cfg.Optimizer != "sgd" && cfg.Optimizer != "adadelta" && cfg.Optimizer != "adam":
		return fmt.Errorf("mnistjob: unknown optimizer %q (want sgd, adadelta or adam)", cfg.Optimizer)
	case commHooks[cfg.CommHook] == nil:
		return fmt.Errorf("mnistjob: unknown comm hook %q (want allreduce, fp16 or bf16)", cfg.CommHook)
	case cfg.LRScaling != "" && cfg.LRScaling != "linear" && cfg.LRScaling != "none":
		return fmt.Errorf("mnistjob: unknown lr scaling %q (want linear or none)", cfg.LRScaling)
	}
	return nil
}

func (cfg *Config) defaults() {
	if cfg.Model == "" {
		cfg.Model = "mlp"
	}
	if cfg.Epochs <= 0 {
		cfg.Epochs = 1
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	if cfg.Optimizer == "" {
		cfg.Optimizer = "sgd"
		if cfg.Model == "cnn" {
			cfg.Optimizer = "adadelta"
		}
	}
	if cfg.LR == 0 {
		cfg.LR = map[string]float64{"sgd": 0.01, "adadelta": 1.0, "adam": 0.001}[cfg.Optimizer]
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

// scaledLR is the learning rate for world ranks (see Config.LRScaling).
func scaledLR(cfg Config, world int) float64 {
	if cfg.LRScaling == "linear" || cfg.LRScaling == "" && cfg.Optimizer == "sgd" {
		return cfg.LR * float64(world)
	}
	return cfg.LR
}

func newOptimizer(cfg Config, params []*tensor.Tensor) (optim.Optimizer, optim.Scheduler, error) {
	var opt optim.Optimizer
	switch cfg.Optimizer {
	case "sgd":
		opt = optim.NewSGD(params, cfg.LR, optim.Momentum(cfg.Momentum))
	case "adadelta":
		opt = optim.NewAdadelta(params, cfg.LR)
	case "adam":
		opt = optim.NewAdam(params, cfg.LR)
	default:
		return nil, nil, fmt.Errorf("mnistjob: unknown optimizer %q (want sgd, adadelta or adam)", cfg.Optimizer)
	}
	var sched optim.Scheduler
	if cfg.Gamma > 0 {
		sched = optim.NewStepLR(opt, 1, cfg.Gamma)
	}
	return opt, sched, nil
}

func loadData(dir string, norm mnist.Option) (train, test *mnist.Dataset, err error) {
	if dir == "" {
		if train, err = mnist.Embedded(mnist.Train, norm); err == nil {
			test, err = mnist.Embedded(mnist.Test, norm)
		}
	} else {
		if train, err = mnist.Load(dir, mnist.Train, norm); err == nil {
			test, err = mnist.Load(dir, mnist.Test, norm)
		}
	}
	return train, test, err
}

// evaluate returns the model's accuracy on ds in eval mode.
func evaluate(model nn.Module, ds *mnist.Dataset) float64 {
	nn.SetTrain(model, false)
	// Batches of 200 bound the CNN's im2col memory in eval.
	loader := data.NewLoader(ds, 200, data.NewSequentialSampler(ds.Len()))
	correct := 0
	tensor.NoGrad(func() {
		for b := range loader.Batches() {
			pred := tensor.ArgMax(model.Forward(b.X), 1)
			for i, p := range pred {
				if p == b.Y[i] {
					correct++
				}
			}
		}
	})
	return float64(correct) / float64(ds.Len())
}

// peakRSSMiB is this process's peak resident set size.
func peakRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // Linux reports KiB
}
