// Package gotrain is distributed data-parallel training in Go, after
// PyTorch's torch.distributed and DistributedDataParallel. This package
// holds no code: it describes how the module is laid out and the
// conventions its packages share.
//
// # Layout
//
// Each folder is a layer; arrows point down only, and each layer keeps
// its private parts in an internal/ directory of its own. From the top:
//
//   - cmd/gotrain: the CLI, flags and wiring only (gotrain run launches
//     any program like torchrun; gotrain train JOB runs a built-in job;
//     gotrain store, bench, env, trace, plot).
//   - jobs/: the built-in training jobs, each only its model, data, loss
//     and evaluation, on package harness.
//   - harness: what every training program needs besides its model: the
//     environment checks, the process group and DDP wiring, the meter,
//     metrics and progress events, resume and checkpoints, the summary.
//     examples/ shows programs of your own written on it.
//   - launch: starts, watches and restarts the workers of a job on one
//     node (torchrun); launch/fanout and launch/agent run a job on several
//     machines over ssh (launch/ssh), after launch/preflight's checks,
//     placing the binary with launch/bincache; launch/hosts reads host
//     lists; launch/rendezvous is the membership of elastic jobs, over a
//     c10d store or etcd (launch/rendezvous/etcd); launch/observe serves
//     the job's metrics, Prometheus and the dashboard.
//   - ddp: DistributedDataParallel over a process group, the one place
//     where tensors meet collectives.
//   - data: datasets, samplers (DistributedSampler) and the batch Loader,
//     token windows for language models; data/text: a byte tokenizer and
//     corpus checks; datasets/mnist: MNIST, embedded in the binary or read
//     from IDX files; datasets/gotext: a corpus of Go sources, embedded.
//   - nn: modules, layers, losses and state dicts (torch.nn); nn/models
//     holds ready-made models. optim: optimizers and learning-rate
//     schedulers (torch.optim). checkpoint: safetensors files and
//     resumable training state.
//   - tensor: float32 tensors with reverse-mode autograd.
//   - distributed: process groups and their collectives
//     (torch.distributed) on flat buffers, knowing nothing of tensors;
//     distributed/store: the key-value stores ranks meet through;
//     distributed/clusterenv: where a worker sits in a job started by
//     gotrain, torchrun, Slurm, MPI or Kubeflow; distributed/shm: shared
//     memory between the ranks of a host; distributed/flightrec: reading
//     the collective flight recorder's dumps. Its transports (TCP), the
//     connection handshake and the PMI client are in distributed/internal.
//   - internal: what every layer shares: the numeric kernels and their
//     assembly generator (internal/kernels), the spare-CPU policy, the
//     option applier, the log format and the test helpers.
//
// Beside the layers: event defines the records a worker sends its
// launcher (progress, metric rows, trace spans, its summary), importing
// only the standard library, so that what renders them links no tensor
// code; progress reports a loop's progress as those events (or draws it
// itself when run alone), progress/console renders them on a terminal;
// metrics records a loop's per-step metrics and timeline.
// testing/clustertest builds a cluster of network namespaces running real
// sshd for multi-node tests.
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
