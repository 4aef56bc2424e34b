// Command mnist is the program of gotrain's design written as a user would
// write it: PyTorch's classic DistributedDataParallel MNIST script, in Go.
//
// Its flags fill a mnistjob.Config and mnistjob.Run is the training loop,
// the same one `gotrain train mnist` runs (jobs/mnistjob/train.go reads
// like the README's snippet). It joins the process group (env:// under
// `gotrain run`, torchrun or a Kubernetes PyTorchJob; tcp://host:port or
// file:///path with --rank and --world-size when started by hand), wraps
// the model in DDP, gives each rank its shard of the training set with a
// DistributedSampler, trains, evaluates and saves on rank 0 and leaves the
// group. Started alone, with no WORLD_SIZE and no --init-method, it trains
// in this one process.
//
//	go build -o mnist-example ./examples/mnist
//	gotrain run --nproc-per-node 2 ./mnist-example --epochs 1
//
// Rank 0's last line, the only one on its stdout, is a summary:
//
//	model=mlp world=2 epochs=1 steps=469 samples_per_s=… test_acc=… peak_rss_mib=…
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/gotrain/gotrain/jobs/mnistjob"
)

func main() {
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		os.Exit(2) // the flag package has printed the error and the usage
	}
	// One text record per line on stderr, with this process's rank.
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if r := os.Getenv("RANK"); r != "" {
		log = log.With("rank", r)
	}
	slog.SetDefault(log)
	// `gotrain run` forwards SIGINT and SIGTERM: stop cleanly on either.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := mnistjob.Run(ctx, cfg)
	stop()
	if err != nil {
		slog.Error("mnist: training failed", "err", err)
		os.Exit(1)
	}
	if res.Rank == 0 {
		fmt.Println(res.Summary())
	}
}

// parseFlags turns the command line into the job's Config.
func parseFlags(fs *flag.FlagSet, args []string) (mnistjob.Config, error) {
	cfg := mnistjob.Config{Optimizer: "sgd"}
	initMethod := fs.String("init-method", "env://", "how to find the other ranks: env://, tcp://host:port or file:///path")
	fs.IntVar(&cfg.Rank, "rank", 0, "this process's rank (with tcp:// or file://; env:// reads RANK)")
	fs.IntVar(&cfg.WorldSize, "world-size", 0, "number of processes (with tcp:// or file://; env:// reads WORLD_SIZE)")
	fs.StringVar(&cfg.Model, "model", "mlp", "mlp (784-512-512-10) or cnn (the pytorch/examples MNIST Net)")
	fs.IntVar(&cfg.Epochs, "epochs", 1, "epochs to train")
	fs.IntVar(&cfg.BatchSize, "batch-size", 64, "batch size per rank")
	fs.Float64Var(&cfg.LR, "lr", 0.01, "SGD learning rate")
	fs.Float64Var(&cfg.Momentum, "momentum", 0.9, "SGD momentum (0 for none)")
	scaleLR := fs.Bool("scale-lr", true, "multiply --lr by the number of ranks, whose global batch is that many times larger (the linear scaling rule)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the initial weights and of the shuffling")
	fs.StringVar(&cfg.DataDir, "data", "", "directory with the MNIST IDX files (default: the copy shipped in the binary)")
	fs.StringVar(&cfg.Save, "save", "", "rank 0 saves the model here (safetensors) after each epoch, with a training checkpoint beside it")
	fs.BoolVar(&cfg.Resume, "resume", false, "with --save: carry on from the training checkpoint beside it when restarted")
	fs.IntVar(&cfg.MaxSteps, "max-steps", 0, "stop after this many steps per rank (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}

	// Without --init-method the job joins with env:// only when
	// WORLD_SIZE names more than one rank, and otherwise trains alone.
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "init-method" {
			cfg.InitMethod = *initMethod
		}
	})
	cfg.LRScaling = "none"
	if *scaleLR {
		// N ranks take steps N times the batch: N times the learning rate
		// keeps them training like one process (Goyal et al., 2017).
		cfg.LRScaling = "linear"
	}
	if cfg.Momentum == 0 {
		cfg.Momentum = -1 // the job's zero value means its default 0.9
	}
	return cfg, nil
}
