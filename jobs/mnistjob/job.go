// Package mnistjob is the MNIST training job that `gotrain train mnist`
// runs: an MLP or the pytorch/examples CNN trained with DDP on MNIST,
// with its test accuracy after each epoch. It is the model, the data, the
// loss and the evaluation; package harness is the rest (the process
// group, DDP, the loop's bookkeeping, checkpoints and resuming, progress,
// metrics and the summary).
//
// Run reads as its steps: check the Config, start the harness run, build
// the model and wrap it, load the data, make the optimizer, resume, train;
// job is the harness.Task, its Step the classic PyTorch step.
package mnistjob

import (
	"context"
	"fmt"
	"sync"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/datasets/mnist"
	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/jobs/jobflag"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// Result summarises a run as this process saw it; only rank 0 evaluates
// and reports.
type Result struct {
	Model         string
	World         int
	Rank          int
	Epochs        int     // the last epoch trained, counting from 1
	Steps         int     // taken in this run (after a resume: since it)
	SamplesPerSec float64 // all ranks, over the steps after the first 5
	TestAccuracy  float64 // after the last epoch; 0 on ranks other than 0
	PeakRSSMiB    float64
	Profile       harness.Profile
}

// Summary is the `key=value` line rank 0 prints last.
func (r Result) Summary() string { return r.summary().Line() }

func (r Result) summary() event.Summary {
	var s event.Summary
	s.Add("model", "%s", r.Model)
	s.Add("world", "%d", r.World)
	s.Add("epochs", "%d", r.Epochs)
	s.Add("steps", "%d", r.Steps)
	s.Add("samples_per_s", "%.0f", r.SamplesPerSec)
	s.Add("test_acc", "%.4f", r.TestAccuracy)
	s.Add("peak_rss_mib", "%.0f", r.PeakRSSMiB)
	return s
}

// job is the run's model, data and optimizer: the harness.Task.
type job struct {
	cfg     Config
	run     *harness.Run
	model   nn.Module     // the replica: what is evaluated and saved
	replica harness.Model // model, or its DDP wrapper: what is trained
	psgd    *ddp.PowerSGD // with CommHook "powersgd" in a group: the hook, whose state is checkpointed

	trainSet, testSet *mnist.Dataset
	sampler           *data.DistributedSampler
	loader            *data.Loader
	opt               optim.Optimizer
	sched             optim.Scheduler // nil without decay
	accuracy          float64         // of the last evaluation
}

// Run trains on this process's share of MNIST, as one rank of a job if
// cfg (or the environment, see harness.Config.InitMethod) names one, and
// has rank 0 report the summary (see harness.Run.Report). It returns
// the first error of the environment (config, data, a peer, ctx).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, fmt.Errorf("mnistjob: %w", err)
	}
	cfg = cfg.withDefaults()
	if cfg.DataDir == "" {
		// The shipped copy decompresses (about 0.2 s of CPU) while the
		// group forms and DDP copies the weights; loadData then finds it
		// decoded.
		var prefetch sync.WaitGroup
		defer prefetch.Wait()
		prefetch.Go(func() {
			_, _ = mnist.Embedded(mnist.Train)
			_, _ = mnist.Embedded(mnist.Test)
		})
	}
	r, err := harness.Start(ctx, cfg.Config)
	if err != nil {
		return Result{}, fmt.Errorf("mnistjob: %w", err)
	}
	defer r.Close()
	// Each worker's share of the CPUs, as the launcher set it
	// (GOTRAIN_NUM_THREADS; see --nproc-per-node auto).
	r.Logger().Info("kernel threads", "threads", kernels.NumThreads())
	j := &job{cfg: cfg, run: r}
	if err := j.buildModel(ctx); err != nil {
		return Result{}, err
	}
	if err := j.loadData(); err != nil {
		return Result{}, err
	}
	j.newOptimizer()
	loop := harness.Loop{Data: j.loader, Sampler: j.sampler, Epochs: cfg.Epochs, MaxSteps: cfg.MaxSteps,
		State: &checkpoint.TrainingState{Model: j.model, Optimizer: j.opt, Scheduler: j.sched}}
	if j.psgd != nil {
		loop.State.CommHook = j.psgd
	}
	if err := j.resume(ctx, &loop); err != nil {
		return Result{}, err
	}
	stats, err := r.Train(ctx, j, loop)
	if err != nil {
		return Result{}, err
	}
	res := Result{Model: cfg.Model, World: stats.World, Rank: stats.Rank, Epochs: stats.Epochs, Steps: stats.Steps,
		SamplesPerSec: stats.Throughput, TestAccuracy: j.accuracy, PeakRSSMiB: stats.PeakRSSMiB, Profile: stats.Profile}
	if res.Rank != 0 {
		res.TestAccuracy = 0 // evaluated under sharding, not reported
	}
	return res, r.Report(res.summary())
}

// buildModel makes the model from the seed, the same on every rank, and
// wraps it for training: in DDP when there is a group, which checks that
// every rank built the same model and copies rank 0's weights to all.
func (j *job) buildModel(ctx context.Context) error {
	nn.Seeded(j.cfg.Seed, func() {
		switch j.cfg.Model {
		case "mlp":
			j.model = models.MLP()
		case "cnn":
			j.model = models.MNISTNet()
		case "cnn-bn":
			j.model = models.MNISTNetBN()
		default:
			panic("mnistjob: buildModel: model " + j.cfg.Model + " passed check")
		}
	})
	if err := j.syncBatchNorm(ctx); err != nil {
		return err
	}
	var err error
	hook, psgd, err := jobflag.CommHook(j.cfg.CommHook, j.cfg.PowerSGD, j.run.World())
	if err != nil {
		return fmt.Errorf("mnistjob: %w", err)
	}
	j.psgd = psgd // its state goes into checkpoints
	j.replica, err = j.run.Wrap(ctx, j.model, hook)
	if err != nil {
		return fmt.Errorf("mnistjob: %w", err)
	}
	return nil
}

// syncBatchNorm makes the model's BatchNorm layers normalise over the
// global batch, if the run asks for it and has a group. Their statistics
// go over a group of their own: DDP's reductions may run beside backward,
// and two goroutines' collectives on one group may be ordered differently
// on different ranks.
func (j *job) syncBatchNorm(ctx context.Context) error {
	g := j.run.Group()
	if !j.cfg.SyncBN || g == nil {
		return nil // alone, the local batch is the global one
	}
	all := make([]int, g.Size())
	for r := range all {
		all[r] = r
	}
	bnGroup, err := g.NewGroup(ctx, all)
	if err != nil {
		return fmt.Errorf("mnistjob: a group for SyncBatchNorm: %w", err)
	}
	s, err := ddp.ConvertSyncBatchNorm(ctx, j.model, bnGroup)
	if err != nil {
		return fmt.Errorf("mnistjob: %w", err)
	}
	j.run.Logger().Info("BatchNorm over the global batch (SyncBatchNorm)", "layers", s.Layers(), "world", g.Size())
	return nil
}

// loadData loads both splits and gives this rank its shard of the
// training set.
func (j *job) loadData() error {
	norm := mnist.Normalize(0.1307, 0.3081)
	var err error
	if dir := j.cfg.DataDir; dir == "" {
		if j.trainSet, err = mnist.Embedded(mnist.Train, norm); err == nil {
			j.testSet, err = mnist.Embedded(mnist.Test, norm)
		}
	} else if j.trainSet, err = mnist.Load(dir, mnist.Train, norm); err == nil {
		j.testSet, err = mnist.Load(dir, mnist.Test, norm)
	}
	if err != nil {
		return fmt.Errorf("mnistjob: loading MNIST: %w", err)
	}
	j.sampler = data.NewDistributedSampler(j.trainSet.Len(), j.run.World(), j.run.Rank(), data.Seed(j.cfg.Seed))
	j.loader = data.NewLoader(j.trainSet, j.cfg.BatchSize, j.sampler)
	return nil
}

// newOptimizer makes the optimizer, at the learning rate scaled to the
// world, and the per-epoch StepLR schedule if Gamma asks for one.
func (j *job) newOptimizer() {
	params, lr := j.replica.Parameters(), scaledLR(j.cfg, j.run.World())
	switch j.cfg.Optimizer {
	case "sgd":
		j.opt = optim.NewSGD(params, lr, optim.Momentum(*j.cfg.Momentum))
	case "adadelta":
		j.opt = optim.NewAdadelta(params, lr)
	case "adam":
		j.opt = optim.NewAdam(params, lr)
	case "adamw":
		j.opt = optim.NewAdamW(params, lr)
	default:
		panic("mnistjob: newOptimizer: optimizer " + j.cfg.Optimizer + " passed check")
	}
	if *j.cfg.Gamma > 0 {
		j.sched = optim.NewStepLR(j.opt, 1, *j.cfg.Gamma)
	}
}

// resume loads rank 0's last checkpoint on every rank, if asked. An
// elastic job resumes in a world of another size: the harness re-shards
// the epoch's rest, and the learning rate scaled to the world follows it
// (the schedule's decay so far is kept).
func (j *job) resume(ctx context.Context, loop *harness.Loop) error {
	was, err := j.run.Resume(ctx, loop)
	if err != nil {
		return fmt.Errorf("mnistjob: %w", err)
	}
	if world := j.run.World(); was > 0 && was != world {
		if lr := scaledLR(j.cfg, world) / scaledLR(j.cfg, was); lr != 1 {
			j.opt.SetLR(j.opt.LR() * lr)
		}
		j.run.Logger().Info("resuming in a world of another size", "was", was, "world", world, "lr", j.opt.LR())
	}
	return nil
}

// Step is the PyTorch DDP step on batch b.
func (j *job) Step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
	j.opt.ZeroGrad()
	var loss *tensor.Tensor
	j.run.Autocast(func() { loss = nn.CrossEntropy(j.replica.Forward(b.X), b.Y) })
	s.Forwarded()
	// A failed allreduce (a dead peer) surfaces here, never as a hang.
	if err := loss.Backward(); err != nil {
		return 0, err
	}
	s.Backwarded()
	l := float64(loss.Item())
	// A NaN or infinite loss: --on-nan says whether to update.
	update, err := s.Update(ctx, l, 0)
	if err != nil {
		return 0, err
	}
	if update {
		j.opt.Step()
	}
	return l, nil
}

// EndEpoch steps the per-epoch schedule.
func (j *job) EndEpoch(int) {
	if j.sched != nil {
		j.sched.Step()
	}
}

// Evaluate returns the model's accuracy on the test set, in eval mode,
// and puts it back in training mode.
func (j *job) Evaluate(context.Context) ([]harness.Metric, error) {
	nn.SetTrain(j.model, false)
	defer nn.SetTrain(j.model, true)
	// Batches of 200 bound the CNN's im2col memory in eval.
	loader := data.NewLoader(j.testSet, 200, data.NewSequentialSampler(j.testSet.Len()))
	correct := 0
	tensor.NoGrad(func() {
		j.run.Autocast(func() {
			for b := range loader.Batches() {
				for i, p := range tensor.ArgMax(j.model.Forward(b.X), 1) {
					if p == b.Y[i] {
						correct++
					}
				}
			}
		})
	})
	j.accuracy = float64(correct) / float64(j.testSet.Len())
	return []harness.Metric{{Name: "test_acc", Value: j.accuracy}}, nil
}
