package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/jobs/mnistjob"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/progress"
)

// trainWorkerEnv marks a process started by `gotrain train` as one of its
// workers; summaryFileEnv is where rank 0 leaves the summary line so the
// launching process can print it last, unprefixed.
const (
	trainWorkerEnv = "GOTRAIN_TRAIN_WORKER"
	summaryFileEnv = "GOTRAIN_TRAIN_SUMMARY"
)

var trainCmd = &cobra.Command{
	Use:   "train",
	Short: "Train a built-in demo job",
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
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return trainMNIST(cmd.Context(), fl) },
	}
	fl.register(cmd.Flags())
	return cmd
}

// trainMNIST runs the job in this process, or starts the workers that do.
func trainMNIST(ctx context.Context, fl trainMNISTFlags) error {
	cfg := fl.job
	if cfg.Momentum == 0 {
		cfg.Momentum = -1 // the job's zero value means "default 0.9"
	}
	n, err := parseNProcPerNode(fl.nproc)
	if err != nil {
		return err
	}
	every, err := logEvery(fl.logEvery)
	if err != nil {
		return err
	}
	if n > 1 && os.Getenv(trainWorkerEnv) == "" {
		fl.launch.NProcPerNode = n
		return launchTrainWorkers(ctx, fl.launch, every)
	}
	if cfg.Progress {
		// Under the launcher this sends events; alone it renders here,
		// with the job's lines and records printed above the bar.
		rep := progress.FromEnv(progress.LogEvery(every))
		defer rep.Close()
		cfg.Reporter, cfg.Out = rep, rep.Writer()
		cfg.Logger = slog.New(slog.NewTextHandler(rep.Writer(), nil))
	}
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
	f.StringVar(&fl.launch.LogDir, "log-dir", "", "with --nproc-per-node > 1: also write each worker's output under this directory")
	f.StringVar(&cfg.Model, "model", "mlp", "mlp (784-512-512-10) or cnn (the pytorch/examples MNIST Net)")
	f.IntVar(&cfg.Epochs, "epochs", 1, "epochs to train")
	f.IntVar(&cfg.BatchSize, "batch-size", 64, "batch size per worker")
	f.Float64Var(&cfg.LR, "lr", 0, "learning rate (default 0.01 for sgd, 1.0 for adadelta, 0.001 for adam)")
	f.StringVar(&cfg.Optimizer, "optimizer", "", "sgd, adadelta or adam (default sgd for mlp, adadelta for cnn)")
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
	f.StringVar(&cfg.LRScaling, "lr-scaling", "", "adapt --lr to the global batch of N ranks: linear (×N) or none; default linear for sgd, none for adadelta and adam")
	f.StringVar(&cfg.CommHook, "comm-hook", "allreduce", "how DDP reduces gradients: allreduce (float32), fp16 or bf16 (compressed)")
	addLogEvery(f, &fl.logEvery)
}

// launchTrainWorkers re-runs this command as cfg.NProcPerNode workers
// under the launcher and prints rank 0's summary as the last line.
func launchTrainWorkers(ctx context.Context, cfg launch.Config, every time.Duration) error {
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
	cfg.Env = append(os.Environ(), trainWorkerEnv+"=1", summaryFileEnv+"="+summary)
	cons := attachConsole(&cfg, every)
	code, err := launch.Run(ctx, cfg)
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
