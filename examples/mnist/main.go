// Command mnist is a training program of your own on gotrain: PyTorch's
// classic DistributedDataParallel MNIST script, in Go, on package harness.
//
// The program is what is its own: the model (an MLP or the
// pytorch/examples CNN), the data (MNIST, each rank its shard through a
// DistributedSampler), the step (zero_grad, forward, loss, backward, step)
// and the evaluation (the test accuracy, on rank 0), a harness.Task. The
// harness does the rest: it joins the process group (env:// under
// `gotrain run`, torchrun, Slurm, MPI or a Kubernetes PyTorchJob;
// tcp://host:port or file:///path with --rank and --world-size when
// started by hand; alone otherwise), wraps the model in DDP, runs the
// loop, checkpoints and resumes with --save and --resume, and has rank 0
// report the summary.
//
//	go build -o mnist-example ./examples/mnist
//	gotrain run --nproc-per-node 2 ./mnist-example --epochs 1
//
// Progress (the epoch, its steps and the run's, the loss, samples/s and
// the ETA) goes to stderr: under `gotrain run` as events that the
// launcher draws, alone as a bar on a terminal or plain lines elsewhere;
// -progress=false leaves rank 0's line per epoch. The harness reports
// each step once to the progress display and to the metrics rows.
//
// Rank 0's last line, the only one on its stdout, is a summary:
//
//	model=mlp world=2 epochs=1 steps=469 samples_per_s=… test_acc=… peak_rss_mib=…
//
// `gotrain train mnist` (jobs/mnistjob) is the same program with more
// choices (optimizers, schedules, precision), built into gotrain.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/datasets/mnist"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// options are the command line: how the program runs (the harness's
// settings) and what it trains.
type options struct {
	run      harness.Config
	model    string
	epochs   int
	batch    int
	lr       float64
	momentum float64
	seed     uint64
	dataDir  string
	maxSteps int
}

func main() {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		os.Exit(2) // the flag package has printed the error and the usage
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	// `gotrain run` forwards SIGINT and SIGTERM: stop cleanly on either.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = train(ctx, o)
	stop()
	if err != nil {
		slog.Error("mnist: training failed", "err", err)
		// 1, or the status that tells the launcher another rank's
		// failure caused this one (so that it names that rank).
		os.Exit(harness.ExitCode(os.Stderr, err))
	}
}

// parseFlags reads the command line.
func parseFlags(fs *flag.FlagSet, args []string) (options, error) {
	o := options{run: harness.Config{Summary: os.Stdout}}
	fs.StringVar(&o.run.InitMethod, "init-method", "", "how to find the other ranks: env://, tcp://host:port or file:///path (default: env:// if WORLD_SIZE names several ranks, else alone)")
	fs.IntVar(&o.run.Rank, "rank", 0, "this process's rank (with tcp:// or file://; env:// reads RANK)")
	fs.IntVar(&o.run.WorldSize, "world-size", 0, "number of processes (with tcp:// or file://; env:// reads WORLD_SIZE)")
	fs.StringVar(&o.run.Save, "save", "", "rank 0 saves the model here (safetensors) after each epoch, with a training checkpoint beside it")
	fs.BoolVar(&o.run.Resume, "resume", false, "with --save: carry on from the training checkpoint beside it when restarted")
	fs.BoolVar(&o.run.Progress, "progress", true, "show progress: a bar per epoch with the step of the run's total and its ETA (plain lines when stderr is not a terminal; under gotrain run, the launcher's display)")
	fs.StringVar(&o.model, "model", "mlp", "mlp (784-512-512-10) or cnn (the pytorch/examples MNIST Net)")
	fs.IntVar(&o.epochs, "epochs", 1, "epochs to train")
	fs.IntVar(&o.batch, "batch-size", 64, "batch size per rank")
	fs.Float64Var(&o.lr, "lr", 0.01, "SGD learning rate of one rank; N ranks, whose steps take N times the batch, use N times it")
	fs.Float64Var(&o.momentum, "momentum", 0.9, "SGD momentum (0 for none)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the initial weights and of the shuffling")
	fs.StringVar(&o.dataDir, "data", "", "directory with the MNIST IDX files (default: the copy shipped in the binary)")
	fs.IntVar(&o.maxSteps, "max-steps", 0, "stop after this many steps per rank (0: no limit)")
	return o, fs.Parse(args)
}

// train is the program: build, train, report.
func train(ctx context.Context, o options) error {
	newModel := map[string]func() *nn.SequentialLayer{"mlp": models.MLP, "cnn": models.MNISTNet}[o.model]
	if newModel == nil {
		return fmt.Errorf("model %q: want mlp or cnn", o.model)
	}
	r, err := harness.Start(ctx, o.run) // joins the group if there is one
	if err != nil {
		return err
	}
	defer r.Close()

	// The model, the same on every rank; DDP (with a group) broadcasts
	// rank 0's weights and averages the gradients in Backward.
	nn.SetSeed(o.seed)
	model := newModel()
	m, err := r.Wrap(ctx, model)
	if err != nil {
		return err
	}

	// The data: each rank its shard of the training set.
	trainSet, testSet, err := load(o.dataDir)
	if err != nil {
		return err
	}
	sampler := data.NewDistributedSampler(trainSet.Len(), r.World(), r.Rank(), data.Seed(o.seed))

	// N ranks take steps N times the batch: N times the learning rate
	// keeps them training like one process (Goyal et al., 2017).
	opt := optim.NewSGD(m.Parameters(), o.lr*float64(r.World()), optim.Momentum(o.momentum))

	t := &task{run: r, module: model, model: m, opt: opt, test: testSet}
	stats, err := r.Train(ctx, t, harness.Loop{
		Data:     data.NewLoader(trainSet, o.batch, sampler),
		Sampler:  sampler,
		State:    &checkpoint.TrainingState{Model: model, Optimizer: opt},
		Epochs:   o.epochs,
		MaxSteps: o.maxSteps,
	})
	if err != nil {
		return err
	}

	var s event.Summary
	s.Add("model", "%s", o.model)
	s.Add("world", "%d", stats.World)
	s.Add("epochs", "%d", stats.Epochs)
	s.Add("steps", "%d", stats.Steps)
	s.Add("samples_per_s", "%.0f", stats.Throughput)
	s.Add("test_acc", "%.4f", t.accuracy)
	s.Add("peak_rss_mib", "%.0f", stats.PeakRSSMiB)
	return r.Report(s) // rank 0's last line
}

// load returns the training and test sets, normalised as in PyTorch's
// example, from dir or the copy in the binary.
func load(dir string) (trainSet, testSet *mnist.Dataset, err error) {
	norm := mnist.Normalize(0.1307, 0.3081)
	if dir == "" {
		if trainSet, err = mnist.Embedded(mnist.Train, norm); err == nil {
			testSet, err = mnist.Embedded(mnist.Test, norm)
		}
	} else if trainSet, err = mnist.Load(dir, mnist.Train, norm); err == nil {
		testSet, err = mnist.Load(dir, mnist.Test, norm)
	}
	return trainSet, testSet, err
}

// task is what the harness trains: the step and the evaluation.
type task struct {
	run      *harness.Run
	module   nn.Module     // evaluated on rank 0
	model    harness.Model // module, or its DDP wrapper: trained
	opt      optim.Optimizer
	test     *mnist.Dataset
	accuracy float64
}

// Step is PyTorch's DDP training step.
func (t *task) Step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
	t.opt.ZeroGrad()
	loss := nn.CrossEntropy(t.model.Forward(b.X), b.Y)
	s.Forwarded()
	if err := loss.Backward(); err != nil { // a failed allreduce surfaces here, never as a hang
		return 0, err
	}
	s.Backwarded()
	l := float64(loss.Item())
	// A NaN or infinite loss stops the run, or skips this update on every
	// rank, as --on-nan (harness.Config.OnNaN) says.
	if ok, err := s.Update(ctx, l, 0); err != nil || !ok {
		return l, err
	}
	t.opt.Step()
	return l, nil
}

// Evaluate is the accuracy on the test set, in eval mode.
func (t *task) Evaluate(context.Context) ([]harness.Metric, error) {
	nn.SetTrain(t.module, false)
	defer nn.SetTrain(t.module, true)
	correct := 0
	tensor.NoGrad(func() {
		for b := range data.NewLoader(t.test, 200, data.NewSequentialSampler(t.test.Len())).Batches() {
			for i, p := range tensor.ArgMax(t.module.Forward(b.X), 1) {
				if p == b.Y[i] {
					correct++
				}
			}
		}
	})
	t.accuracy = float64(correct) / float64(t.test.Len())
	return []harness.Metric{{Name: "test_acc", Value: t.accuracy}}, nil
}
