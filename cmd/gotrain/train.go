package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/internal/logging"
	"github.com/gotrain/gotrain/jobs/mnistjob"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/progress"
	"github.com/gotrain/gotrain/tensor"
)

// trainWorkerEnv marks a process started by `gotrain train` as one of its
// workers; summaryFileEnv is where rank 0 leaves the summary line so the
// launching process can print it last, unprefixed.
const (
	trainWorkerEnv = "GOTRAIN_TRAIN_WORKER"
	summaryFileEnv = "GOTRAIN_TRAIN_SUMMARY"
)

var trainCmd = &cobra.Command{
	Use:   "train JOB",
	Short: "Train a built-in demo job",
	Args:  cobra.ArbitraryArgs,
	RunE:  unknownSubcommand,
}

func init() {
	rootCmd.AddCommand(trainCmd)
	trainCmd.AddCommand(newTrainMNISTCmd())
}

// trainMNISTFlags are the flags of `gotrain train mnist`: the job's
// Config and, for --nproc-per-node > 1, the launcher's.
type trainMNISTFlags struct {
	job      mnistjob.Config
	nproc    string
	logEvery string
	launch   launch.Config
	output   outputFlags
	timeout  timeoutFlag
	hosts    hostFlags
	observe  observeFlags
}

// newTrainMNISTCmd is `gotrain train mnist`.
func newTrainMNISTCmd() *cobra.Command {
	var fl trainMNISTFlags
	cmd := &cobra.Command{
		Use:   "mnist",
		Short: "Train an MNIST classifier (MLP or the pytorch/examples CNN), on one or several local workers",
		Long: `Train an MNIST classifier on the copy of MNIST shipped in the binary.

With --nproc-per-node N > 1 it starts N workers like 'gotrain run' and trains
them with DistributedDataParallel. The last line printed is a summary:
model= world= epochs= steps= samples_per_s= test_acc= peak_rss_mib=`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fl.hosts.applies(cmd.Flags()) {
				if os.Getenv(trainWorkerEnv) == "" {
					return trainMNISTOnHosts(cmd.Context(), cmd.Flags(), fl)
				}
				return trainMNIST(cmd.Context(), fl, 1) // one worker; the launcher checked the flags
			}
			n, err := fl.check(cmd.Flags())
			if err != nil {
				return err
			}
			return trainMNIST(cmd.Context(), fl, n)
		},
	}
	fl.register(cmd.Flags())
	return cmd
}

// trainMNIST runs the job in this process, or starts the n workers that
// do; fl has passed check.
func trainMNIST(ctx context.Context, fl trainMNISTFlags, n int) error {
	cfg := fl.job
	if cfg.Momentum == 0 {
		cfg.Momentum = -1 // the job's zero value means "default 0.9"
	}
	worker := os.Getenv(trainWorkerEnv) != ""
	cfg.Metrics, cfg.Trace, cfg.MetricsEvery = fl.observe.jobConfig()
	fl.timeout.export()
	every, err := logEvery(fl.logEvery) // checked by check
	if err != nil {
		return err
	}
	if n > 1 && !worker {
		fl.launch.NProcPerNode = n
		return launchTrainWorkers(ctx, fl.launch, fl.output, every, fl.observe)
	}
	logOut := io.Writer(os.Stderr)
	if cfg.Progress {
		// Under the launcher this sends events; alone it renders here,
		// with the job's lines and records printed above the bar.
		rep := progress.FromEnv(progress.LogEvery(every))
		defer rep.Close()
		cfg.Reporter, cfg.Out = rep, rep.Writer()
		logOut = rep.Writer()
	}
	// The job logs as --log-format says, with its rank if it has one.
	log := logging.FromEnv(logOut, fl.output.logFormat)
	slog.SetDefault(log)
	cfg.Logger = log
	res, err := mnistjob.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if res.Rank != 0 {
		return nil
	}
	if f := os.Getenv(summaryFileEnv); f != "" {
		return os.WriteFile(f, []byte(res.Summary()+"\n"), 0o644)
	}
	fmt.Println(res.Summary())
	return nil
}

// register defines the flags on f, with their defaults.
func (fl *trainMNISTFlags) register(f *pflag.FlagSet) {
	cfg := &fl.job
	f.StringVar(&fl.nproc, "nproc-per-node", "1", "number of local workers (an integer, or auto for one per CPU)")
	f.IntVar(&fl.launch.MaxRestarts, "max-restarts", 0, "with --nproc-per-node > 1: restart all workers up to N times when one fails (use with --save and --resume)")
	f.StringVar(&fl.launch.LogDir, "log-dir", "", "with --nproc-per-node > 1: also write each worker's output under this directory (see --tee and --redirects)")
	fl.output.register(f)
	fl.timeout.register(f)
	f.StringVar(&cfg.Model, "model", "mlp", "mlp (784-512-512-10) or cnn (the pytorch/examples MNIST Net)")
	f.IntVar(&cfg.Epochs, "epochs", 1, "epochs to train")
	f.IntVar(&cfg.BatchSize, "batch-size", 64, "batch size per worker")
	f.Float64Var(&cfg.LR, "lr", 0, "learning rate (default 0.01 for sgd, 1.0 for adadelta, 0.001 for adam and adamw)")
	f.StringVar(&cfg.Optimizer, "optimizer", "", "sgd, adadelta, adam or adamw (default sgd for mlp, adadelta for cnn)")
	f.Float64Var(&cfg.Momentum, "momentum", 0.9, "SGD momentum (0 for none)")
	f.Float64Var(&cfg.Gamma, "gamma", 0, "StepLR decay per epoch (0: 0.7 with adadelta, none otherwise; negative: none)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "random seed for initialisation and shuffling")
	f.StringVar(&cfg.DataDir, "data", "", "directory with the MNIST IDX files (default: the copy shipped in the binary)")
	f.StringVar(&cfg.Save, "save", "", "save the model here (safetensors, loadable by PyTorch) after each epoch, with a training checkpoint beside it")
	f.BoolVar(&cfg.Resume, "resume", false, "continue from the training checkpoint beside --save if there is one")
	f.IntVar(&cfg.SaveEvery, "save-every", 0, "also checkpoint every N steps")
	f.IntVar(&cfg.MaxSteps, "max-steps", 0, "stop after N steps per worker (0: no limit)")
	f.BoolVar(&cfg.Profile, "profile", false, "print the mean time per step in data, forward, backward, exposed allreduce wait and optimizer")
	f.BoolVar(&cfg.Progress, "progress", true, "show a progress bar per epoch (plain lines when stderr is not a terminal)")
	f.StringVar(&cfg.LRScaling, "lr-scaling", "", "adapt --lr to the global batch of N ranks: linear (×N) or none; default linear for sgd, none for adadelta, adam and adamw")
	f.StringVar(&cfg.CommHook, "comm-hook", "allreduce", "how DDP reduces gradients: allreduce (float32), fp16 or bf16 (compressed)")
	f.StringVar(&cfg.Precision, "precision", "fp32", "matmuls and convolutions in fp32, bf16 (mixed precision on a bf16 GEMM kernel: needs AMX_BF16, or AVX512_BF16 on AMD Zen 4 or later) or bf16-emulated (the same numerics in software, slower than fp32)")
	addLogEvery(f, &fl.logEvery)
	fl.hosts.registerTrain(f)
	fl.observe.registerJob(f)
}

// launchTrainWorkers re-runs this command as cfg.NProcPerNode workers
// under the launcher and prints rank 0's summary as the last line.
func launchTrainWorkers(ctx context.Context, cfg launch.Config, output outputFlags, every time.Duration, obs observeFlags) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the gotrain binary to start workers: %w", err)
	}
	dir, err := os.MkdirTemp("", "gotrain-train-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	summary := filepath.Join(dir, "summary")
	cfg.Program, cfg.Args, cfg.Standalone = self, os.Args[1:], true
	// The console first: the launcher's records then print through it.
	cons := attachConsole(&cfg, every)
	output.setupLauncherLog(&cfg)
	cfg.Env = append(cfg.Env, trainWorkerEnv+"=1", summaryFileEnv+"="+summary)
	o, err := obs.attach(&cfg)
	if err != nil {
		cons.Close()
		return err
	}
	warnBeforeStart(cfg)
	code, err := launch.Run(ctx, cfg)
	o.done(code, err)
	cons.Close()
	if err != nil {
		return err
	}
	if code != 0 {
		return exitCodeError(code)
	}
	line, err := os.ReadFile(summary)
	if err != nil {
		return fmt.Errorf("rank 0 left no summary: %w", err)
	}
	fmt.Print(strings.TrimSpace(string(line)) + "\n")
	return nil
}

// check refuses, as usage errors naming the flag, every value the job or
// the launcher would not run with, and returns the number of workers.
// It runs in the launching process, before any worker starts.
func (fl *trainMNISTFlags) check(f *pflag.FlagSet) (int, error) {
	n, err := parseNProcPerNode(fl.nproc)
	if err != nil {
		return 0, badFlag("nproc-per-node", fl.nproc, err.Error())
	}
	if err := fl.checkLauncher(f, n); err != nil {
		return 0, err
	}
	if err := fl.output.checkFormat(); err != nil {
		return 0, err
	}
	if err := fl.timeout.check(f); err != nil {
		return 0, err
	}
	if err := fl.observe.check(f, true, n, fl.job.Progress); err != nil {
		return 0, err
	}
	if err := fl.checkTraining(f); err != nil {
		return 0, err
	}
	return n, fl.checkFiles(f)
}

// checkLauncher checks the flags of the launcher, which only n > 1 workers
// use: given with one worker, they would silently do nothing.
func (fl *trainMNISTFlags) checkLauncher(f *pflag.FlagSet, n int) error {
	if n == 1 {
		launcherFlags := []string{"max-restarts", "log-dir", "tee", "redirects", "local-ranks-filter"}
		for _, name := range launcherFlags {
			if f.Changed(name) {
				return badFlag(name, f.Lookup(name).Value.String(), "applies only with --nproc-per-node > 1 (one worker trains in this process)")
			}
		}
		return nil
	}
	if err := checkAtLeast("max-restarts", fl.launch.MaxRestarts, 0); err != nil {
		return err
	}
	if fl.launch.LogDir != "" {
		if err := checkWritableDir("log-dir", fl.launch.LogDir); err != nil {
			return err
		}
	}
	probe := launch.Config{NProcPerNode: n, LogDir: fl.launch.LogDir}
	return fl.output.apply(f, &probe)
}

// checkTraining checks the job's hyper-parameters and choices.
func (fl *trainMNISTFlags) checkTraining(f *pflag.FlagSet) error {
	cfg := fl.job
	if err := checkOneOf("model", cfg.Model, "mlp", "cnn"); err != nil {
		return err
	}
	if err := checkAtLeast("epochs", cfg.Epochs, 1); err != nil {
		return err
	}
	if err := checkAtLeast("batch-size", cfg.BatchSize, 1); err != nil {
		return err
	}
	if f.Changed("lr") {
		if err := checkPositive("lr", cfg.LR); err != nil {
			return err
		}
	}
	opt := cfg.Optimizer
	if f.Changed("optimizer") || opt != "" {
		if err := checkOneOf("optimizer", opt, "sgd", "adadelta", "adam", "adamw"); err != nil {
			return err
		}
	} else if opt = "sgd"; cfg.Model == "cnn" {
		opt = "adadelta"
	}
	if m := cfg.Momentum; !(m >= 0) || math.IsInf(m, 0) {
		return badFlag("momentum", m, "must be a number of at least 0 (0 for none)")
	}
	if f.Changed("momentum") && opt != "sgd" {
		return badFlag("momentum", cfg.Momentum, "applies only to --optimizer sgd (the optimizer is "+opt+")")
	}
	if g := cfg.Gamma; math.IsNaN(g) || math.IsInf(g, 0) {
		return badFlag("gamma", g, "must be a finite number (negative for no decay)")
	}
	if err := checkOneOf("lr-scaling", cfg.LRScaling, "", "linear", "none"); err != nil {
		return badFlag("lr-scaling", cfg.LRScaling, "must be linear or none")
	}
	if err := checkOneOf("comm-hook", cfg.CommHook, "allreduce", "fp16", "bf16"); err != nil {
		return err
	}
	if err := checkPrecision(cfg.Precision); err != nil {
		return err
	}
	if f.Changed("max-steps") {
		if err := checkAtLeast("max-steps", cfg.MaxSteps, 1); err != nil {
			return badFlag("max-steps", cfg.MaxSteps, "must be at least 1 (leave it out for no limit)")
		}
	}
	return nil
}

// checkFiles checks the data directory and the checkpoint flags.
func (fl *trainMNISTFlags) checkFiles(f *pflag.FlagSet) error {
	cfg := fl.job
	if f.Changed("data") {
		if err := checkMNISTDir("data", cfg.DataDir); err != nil {
			return err
		}
	}
	if f.Changed("save-every") {
		if err := checkAtLeast("save-every", cfg.SaveEvery, 1); err != nil {
			return badFlag("save-every", cfg.SaveEvery, "must be at least 1 (leave it out to checkpoint at epoch ends only)")
		}
	}
	switch {
	case f.Changed("save"):
		return checkSavePath("save", cfg.Save)
	case cfg.Resume:
		return flagNeeds("resume", "needs --save, the checkpoint to resume from")
	case f.Changed("save-every"):
		return badFlag("save-every", cfg.SaveEvery, "needs --save, where to checkpoint")
	}
	return nil
}

// checkTrainMNISTArgs checks the arguments of a `gotrain train mnist` run
// as that command would, for a command that runs it.
func checkTrainMNISTArgs(args []string) error {
	var fl trainMNISTFlags
	f := pflag.NewFlagSet("train mnist", pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	fl.register(f)
	if err := f.Parse(args); err != nil {
		return flagErrorFunc(nil, err)
	}
	if f.NArg() > 0 {
		return usagef("train mnist: unexpected argument %q (it takes flags only)", f.Arg(0))
	}
	_, err := fl.check(f)
	return err
}

// checkPrecision refuses a --precision value the job cannot run here:
// bf16 needs a native bf16 kernel (it is refused, not silently emulated,
// since emulation is slower than fp32; bf16-emulated asks for it).
func checkPrecision(p string) error {
	if err := checkOneOf("precision", p, "fp32", "bf16", "bf16-emulated"); err != nil {
		return err
	}
	if p != "bf16" {
		return nil
	}
	if err := tensor.CheckPrecision(tensor.BF16); err != nil {
		return badFlag("precision", p, kernels.BF16Missing()+" (--precision bf16-emulated runs the same numerics in software, slower than fp32)")
	}
	return nil
}
