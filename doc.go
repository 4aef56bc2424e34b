// Package gotrain is distributed data-parallel training in Go, after
// PyTorch's torch.distributed and DistributedDataParallel. This package
// holds no code: it describes how the module is laid out and the
// conventions its packages share.
//
// # Layout
//
// The library, each package usable on its own, from the bottom up:
//
//   - tensor: float32 tensors with reverse-mode autograd.
//   - nn: modules, layers, losses and state dicts (torch.nn); nn/models
//     holds ready-made models.
//   - optim: optimizers and learning-rate schedulers (torch.optim).
//   - data: datasets, samplers (DistributedSampler) and the batch Loader,
//     token windows for language models; data/text: a byte tokenizer and
//     corpus checks; datasets/mnist: MNIST, embedded in the binary or read
//     from IDX files; datasets/gotext: a corpus of Go sources, embedded.
//   - distributed: process groups and their collectives
//     (torch.distributed); distributed/store: the key-value stores ranks
//     meet through.
//   - ddp: DistributedDataParallel over a process group.
//   - checkpoint: safetensors files and resumable training state.
//   - launch: starts and restarts the workers of a job on one node
//     (torchrun); launch/fanout and launch/agent run a job on several
//     machines over ssh, launch/hosts reads their list;
//     launch/rendezvous: the membership of elastic jobs, over a c10d
//     store or etcd (launch/rendezvous/etcd).
//   - progress: a training loop's progress, reported to the launcher's
//     display (or drawn by the program itself when it runs alone).
//   - metrics: a training loop's per-step metrics and timeline, written
//     to files or reported to the launcher (which serves Prometheus and
//     the dashboard).
//
// The program: cmd/gotrain is the CLI (gotrain run launches any program
// like torchrun; gotrain train runs a job; gotrain store serves a store;
// gotrain bench measures), and
// jobs/ holds the training jobs it runs, written with the library as any
// user would. examples/ holds programs to read and copy. internal/ holds
// what only gotrain itself uses: the numeric kernels and their assembly,
// the transports under the process groups, connection authentication,
// shared memory, the launcher's console and log format, the spare-CPU
// policy, the option applier and the test harnesses.
//
// # Options
//
// A constructor takes its required arguments as parameters and its
// optional ones as functional options: each package has one
// type Option func(*config) and functions that return them (nn.Stride,
// optim.Momentum, data.Prefetch, ddp.BucketCapMB). An option that serves
// several constructors of a package is one function (nn.NoBias for Linear
// and Conv2d, data.DropLast for NewLoader and NewDistributedSampler); a
// constructor given an option it does not take panics. Hyper-parameters
// are float64, as PyTorch's Python floats are, whatever precision the
// tensors compute in.
//
// Settings that describe a deployment rather than a model are the fields
// of a Config struct instead, whose zero fields mean the environment's
// value or a default: distributed.Config (torchrun's and Kubernetes'
// variables), launch.Config.
//
// # Errors and panics
//
// An error is returned for what the calling code cannot rule out: the
// environment, meaning files, the network, peers, environment variables,
// and configuration or checkpoints read at run time. Errors name what
// failed, wrap their cause with %w, and wrap a sentinel where callers
// need to tell cases apart (distributed.ErrPeerLost, nn.ErrStateDict,
// data.ErrInvalidState).
//
// A panic is for a mistake in the calling code: an argument no correct
// program passes, such as a negative learning rate, a rank outside the
// world, an input of the wrong shape or an option the constructor does not
// take. Its message starts with the package name and gives the bad value:
// "optim: SGD: invalid learning rate -1". So the constructors of nn,
// optim, data and ddp return no error for their arguments. A program that
// takes such values from its user (a CLI's flags, a job's config file)
// checks them as input, returning an error, before it constructs anything.
//
// # Environment variables
//
// A package reads the environment in one place, the step that resolves
// its configuration (distributed.Init filling its Config, NewLoader
// choosing its prefetch default, the kernels' thread count at start-up),
// never deep inside an operation. A
// variable that decides what runs (RANK, WORLD_SIZE, MASTER_ADDR,
// GOTRAIN_PORT_RANGE) makes that step return an error when it is
// malformed; one that only tunes speed (GOTRAIN_NUM_THREADS,
// LOCAL_WORLD_SIZE for the loader) falls back to its default with a logged
// warning, since every value gives the same results.
package gotrain
