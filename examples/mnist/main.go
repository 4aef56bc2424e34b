// Command mnist is the program of gotrain's design written as a user would
// write it: PyTorch's classic DistributedDataParallel MNIST script, in Go.
//
// It joins the process group (env:// under `gotrain run`, torchrun or a
// Kubernetes PyTorchJob; tcp://host:port with --rank and --world-size when
// started by hand), wraps the model in DDP, gives each rank its shard of the
// training set with a DistributedSampler, trains, evaluates on rank 0, saves
// on rank 0 only and leaves the group. Started alone, with no WORLD_SIZE and
// no --init-method, it trains in this one process.
//
//	go build -o mnist-example ./examples/mnist
//	gotrain run --nproc-per-node 2 ./mnist-example --epochs 1
//
// Rank 0's last line is a summary:
//
//	model=mlp world=2 epochs=1 steps=469 samples_per_s=… test_acc=… peak_rss_mib=…
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

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

type options struct {
	initMethod      string
	initMethodGiven bool
	rank, worldSize int
	model           string
	epochs          int
	batchSize       int
	lr, momentum    float64
	scaleLR         bool
	seed            uint64
	dataDir         string
	save            string
	resume          bool
	maxSteps        int
}

func main() {
	var o options
	flag.StringVar(&o.initMethod, "init-method", "env://", "how to find the other ranks: env://, tcp://host:port or file:///path")
	flag.IntVar(&o.rank, "rank", 0, "this process's rank (with tcp:// or file://; env:// reads RANK)")
	flag.IntVar(&o.worldSize, "world-size", 0, "number of processes (with tcp:// or file://; env:// reads WORLD_SIZE)")
	flag.StringVar(&o.model, "model", "mlp", "mlp (784-512-512-10) or cnn (the pytorch/examples MNIST Net)")
	flag.IntVar(&o.epochs, "epochs", 1, "epochs to train")
	flag.IntVar(&o.batchSize, "batch-size", 64, "batch size per rank")
	flag.Float64Var(&o.lr, "lr", 0.01, "SGD learning rate")
	flag.Float64Var(&o.momentum, "momentum", 0.9, "SGD momentum")
	flag.BoolVar(&o.scaleLR, "scale-lr", true, "multiply --lr by the number of ranks, whose global batch is that many times larger (the linear scaling rule)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the initial weights and of the shuffling")
	flag.StringVar(&o.dataDir, "data", "", "directory with the MNIST IDX files (default: the copy shipped in the binary)")
	flag.StringVar(&o.save, "save", "", "rank 0 saves the model here (safetensors) after training")
	flag.BoolVar(&o.resume, "resume", false, "with --save: checkpoint the training state after each epoch and carry on from it when restarted")
	flag.IntVar(&o.maxSteps, "max-steps", 0, "stop after this many steps per rank (0: no limit)")
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { o.initMethodGiven = o.initMethodGiven || f.Name == "init-method" })

	// `gotrain run` forwards SIGINT and SIGTERM: stop cleanly on either.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		slog.Error("mnist: training failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	// One process unless there is a group to join.
	world, rank := 1, 0
	var pg *distributed.Group
	if ws, _ := strconv.Atoi(os.Getenv("WORLD_SIZE")); o.initMethodGiven || ws > 1 {
		var err error
		pg, err = distributed.Init(ctx, distributed.Config{InitMethod: o.initMethod, Rank: o.rank, WorldSize: o.worldSize})
		if err != nil {
			return fmt.Errorf("joining the process group: %w", err)
		}
		defer pg.Destroy()
		world, rank = pg.Size(), pg.Rank()
	}
	log := slog.With("rank", rank)

	nn.SetSeed(o.seed)
	var model nn.Module
	switch o.model {
	case "mlp":
		model = models.MLP()
	case "cnn":
		model = models.MNISTNet()
	default:
		return fmt.Errorf("unknown model %q (want mlp or cnn)", o.model)
	}
	forward, params := model.Forward, nn.Parameters(model)
	if pg != nil {
		// DDP checks that every rank built the same model and copies rank
		// 0's weights to all; Backward then averages the gradients.
		dm, err := ddp.New(ctx, model, pg)
		if err != nil {
			return err
		}
		defer dm.Close()
		forward, params = dm.Forward, dm.Parameters()
	}

	norm := mnist.Normalize(0.1307, 0.3081)
	train, test, err := loadMNIST(o.dataDir, norm)
	if err != nil {
		return err
	}
	sampler := data.NewDistributedSampler(train.Len(), world, rank, data.Seed(o.seed))
	loader := data.NewLoader(train, o.batchSize, sampler)
	lr := o.lr
	if o.scaleLR {
		// N ranks take steps N times the batch: N times the learning rate
		// keeps them training like one process (Goyal et al., 2017).
		lr *= float64(world)
	}
	opt := optim.NewSGD(params, lr, optim.Momentum(o.momentum))

	// With --resume every rank reads rank 0's last checkpoint: the same
	// weights, optimizer state and place in the data.
	var pos data.SamplerState
	state := checkpoint.TrainingState{Model: model, Optimizer: opt, Extra: &pos}
	if o.resume && o.save != "" {
		switch err := checkpoint.LoadTraining(o.save, &state); {
		case err == nil:
			if err := sampler.Restore(pos); err != nil {
				return fmt.Errorf("resuming from %s: %w", o.save, err)
			}
			log.Info("resumed", "checkpoint", o.save, "epoch", state.Epoch, "step", state.Step)
		case errors.Is(err, fs.ErrNotExist):
			log.Info("no checkpoint yet, starting fresh", "checkpoint", o.save)
		default:
			return err
		}
	}
	checkpointTraining := func(epoch int) error {
		if rank != 0 || !o.resume || o.save == "" {
			return nil
		}
		pos = sampler.State()
		state.Epoch = epoch
		return checkpoint.SaveTraining(o.save, state)
	}

	const warmup = 5 // steps left out of samples/s, as in the PyTorch anchor
	steps, samples := 0, 0
	var start time.Time
	nn.SetTrain(model, true)
	for epoch := state.Epoch; epoch < o.epochs; epoch++ {
		sampler.SetEpoch(epoch) // keeps a restored position within this epoch
		for b := range loader.Batches() {
			if steps == warmup {
				start, samples = time.Now(), 0
			}
			opt.ZeroGrad()
			loss := nn.CrossEntropy(forward(b.X), b.Y)
			// A failed allreduce (a dead peer) surfaces here, never as a hang.
			if err := loss.Backward(); err != nil {
				return err
			}
			opt.Step()
			steps++
			state.Step++
			samples += len(b.Y)
			if o.maxSteps > 0 && steps >= o.maxSteps {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if o.maxSteps > 0 && steps >= o.maxSteps {
			// Stopped within the epoch: a resumed run carries on from here.
			if err := checkpointTraining(epoch); err != nil {
				return err
			}
			break
		}
		if err := checkpointTraining(epoch + 1); err != nil {
			return err
		}
	}
	if pg != nil {
		// Wait for the slowest rank so that samples/s counts every rank's work.
		if err := pg.Barrier(ctx); err != nil {
			return err
		}
	}
	var perSec float64
	if !start.IsZero() {
		perSec = float64(samples*world) / time.Since(start).Seconds()
	}
	if rank != 0 {
		return nil
	}

	acc := accuracy(model, test)
	if o.save != "" && !o.resume { // with --resume, checkpointTraining has saved it
		if err := checkpoint.Save(o.save, model); err != nil {
			return err
		}
	}
	fmt.Printf("model=%s world=%d epochs=%d steps=%d samples_per_s=%.0f test_acc=%.4f peak_rss_mib=%.0f\n",
		o.model, world, o.epochs, steps, perSec, acc, peakRSSMiB())
	return nil
}

// peakRSSMiB is this process's peak resident set size (Linux reports
// ru_maxrss in KiB), the figure to compare with a PyTorch rank's.
func peakRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024
}

func loadMNIST(dir string, norm mnist.Option) (train, test *mnist.Dataset, err error) {
	if dir == "" {
		if train, err = mnist.Embedded(mnist.Train, norm); err == nil {
			test, err = mnist.Embedded(mnist.Test, norm)
		}
		return train, test, err
	}
	if train, err = mnist.Load(dir, mnist.Train, norm); err == nil {
		test, err = mnist.Load(dir, mnist.Test, norm)
	}
	return train, test, err
}

// accuracy is the fraction of ds the model classifies correctly, in eval mode.
func accuracy(model nn.Module, ds *mnist.Dataset) float64 {
	nn.SetTrain(model, false)
	defer nn.SetTrain(model, true)
	loader := data.NewLoader(ds, 500, data.NewSequentialSampler(ds.Len()))
	correct := 0
	tensor.NoGrad(func() {
		for b := range loader.Batches() {
			for i, p := range tensor.ArgMax(model.Forward(b.X), 1) {
				if p == b.Y[i] {
					correct++
				}
			}
		}
	})
	return float64(correct) / float64(ds.Len())
}
