// Package mnistjob is the MNIST training job: the program the README
// teaches (process group, DDP, DistributedSampler, optimizer, rank-0
// checkpoint) that both `gotrain train mnist` and examples/mnist run, with
// test accuracy after each epoch, resume, an optional progress bar and a
// per-step profile.
//
// Run reads as its steps: join the group, build the model, wrap it in
// DDP, load the data, make the optimizer, resume, train (train.go), and
// each is a method of job named for what it does.
package mnistjob

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

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
	Profile       Profile
}

// Summary is the `key=value` line the CLI and the example print last.
func (r Result) Summary() string {
	return fmt.Sprintf("model=%s world=%d epochs=%d steps=%d samples_per_s=%.0f test_acc=%.4f peak_rss_mib=%.0f",
		r.Model, r.World, r.Epochs, r.Steps, r.SamplesPerSec, r.TestAccuracy, r.PeakRSSMiB)
}

// job is one run's state, built up by Run's steps.
type job struct {
	cfg         Config
	log         *slog.Logger
	pg          *distributed.Group // nil when training alone
	world, rank int
	prefetch    sync.WaitGroup // decoding the shipped MNIST ahead of loadData

	model   nn.Module  // the replica: what is evaluated and saved
	dm      *ddp.Model // nil when training alone
	forward func(*tensor.Tensor) *tensor.Tensor
	params  []*tensor.Tensor

	trainSet, testSet *mnist.Dataset
	sampler           *data.DistributedSampler
	loader            *data.Loader
	opt               optim.Optimizer
	sched             optim.Scheduler // nil without decay

	ckpt  checkpoint.TrainingState // counters and what SaveTraining writes
	extra resumeState
}

// resumeState is what the training sidecar carries besides model,
// optimizer and scheduler.
type resumeState struct {
	Sampler data.SamplerState `json:"sampler"`
}

// Run trains on this process's share of MNIST, as one rank of a job if
// cfg (or the environment, see Config.InitMethod) names one. It returns
// the first error of the environment (config, data, a peer, ctx).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.resolve(); err != nil {
		return Result{}, err
	}
	j := &job{cfg: cfg, log: cfg.Logger, world: 1}
	defer j.close()
	if cfg.DataDir == "" {
		// The shipped copy decompresses (about 0.2 s of CPU) while the
		// group forms and DDP copies the weights; loadData then finds it
		// decoded.
		j.prefetch.Go(func() {
			_, _ = mnist.Embedded(mnist.Train)
			_, _ = mnist.Embedded(mnist.Test)
		})
	}
	if cfg.Precision == "bf16-emulated" {
		defer tensor.SetBF16Emulation(tensor.SetBF16Emulation(true))
		j.log.Info("bf16 emulated: matmul and convolution operands rounded to bf16 in software, multiplied in float32 (bf16 numerics at below-fp32 speed)")
	}
	if err := j.joinGroup(ctx); err != nil {
		return Result{}, err
	}
	j.buildModel()
	if err := j.wrapDDP(ctx); err != nil {
		return Result{}, err
	}
	if err := j.loadData(); err != nil {
		return Result{}, err
	}
	j.newOptimizer()
	if err := j.resume(ctx); err != nil {
		return Result{}, err
	}
	return j.train(ctx)
}

// joinGroup joins the process group if the job has more than one rank.
func (j *job) joinGroup(ctx context.Context) error {
	if j.cfg.InitMethod == "" {
		return nil
	}
	pg, err := distributed.Init(ctx, distributed.Config{InitMethod: j.cfg.InitMethod, Rank: j.cfg.Rank, WorldSize: j.cfg.WorldSize})
	if err != nil {
		return fmt.Errorf("mnistjob: joining the process group: %w", err)
	}
	j.pg, j.world, j.rank = pg, pg.Size(), pg.Rank()
	return nil
}

// buildModel makes the model from the seed, the same on every rank.
func (j *job) buildModel() {
	nn.SetSeed(j.cfg.Seed)
	switch j.cfg.Model {
	case "mlp":
		j.model = models.MLP()
	case "cnn":
		j.model = models.MNISTNet()
	default:
		panic("mnistjob: buildModel: model " + j.cfg.Model + " passed validate")
	}
	j.forward, j.params = j.model.Forward, nn.Parameters(j.model)
}

// wrapDDP wraps the model in DDP when there is a group: New checks that
// every rank built the same model and copies rank 0's weights to all;
// each Backward then averages the gradients.
func (j *job) wrapDDP(ctx context.Context) error {
	if j.pg == nil {
		return nil
	}
	dm, err := ddp.New(ctx, j.model, j.pg, ddp.GradientAsBucketView(true), ddp.WithCommHook(commHooks[j.cfg.CommHook]))
	if err != nil {
		return fmt.Errorf("mnistjob: wrapping the model in DDP: %w", err)
	}
	j.dm, j.forward, j.params = dm, dm.Forward, dm.Parameters()
	return nil
}

// close releases DDP, then the group.
func (j *job) close() {
	j.prefetch.Wait()
	if j.dm != nil {
		j.dm.Close()
	}
	if j.pg != nil {
		j.pg.Destroy()
	}
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
	j.sampler = data.NewDistributedSampler(j.trainSet.Len(), j.world, j.rank, data.Seed(j.cfg.Seed))
	j.loader = data.NewLoader(j.trainSet, j.cfg.BatchSize, j.sampler)
	return nil
}

// newOptimizer makes the optimizer, at the learning rate scaled to the
// world, and the per-epoch StepLR schedule if Gamma asks for one.
func (j *job) newOptimizer() {
	lr := scaledLR(j.cfg, j.world)
	switch j.cfg.Optimizer {
	case "sgd":
		j.opt = optim.NewSGD(j.params, lr, optim.Momentum(j.cfg.Momentum))
	case "adadelta":
		j.opt = optim.NewAdadelta(j.params, lr)
	case "adam":
		j.opt = optim.NewAdam(j.params, lr)
	case "adamw":
		j.opt = optim.NewAdamW(j.params, lr)
	default:
		panic("mnistjob: newOptimizer: optimizer " + j.cfg.Optimizer + " passed validate")
	}
	if j.cfg.Gamma > 0 {
		j.sched = optim.NewStepLR(j.opt, 1, j.cfg.Gamma)
	}
	j.ckpt = checkpoint.TrainingState{Model: j.model, Optimizer: j.opt, Scheduler: j.sched, Extra: &j.extra}
}

// resume loads rank 0's last training checkpoint on every rank, if asked
// and if rank 0 has one: the same weights, optimizer state, counters and
// place in the data. Rank 0's file is the source of truth and reaches the
// other ranks over the group, so ranks need no shared file system.
func (j *job) resume(ctx context.Context) error {
	if !j.cfg.Resume {
		return nil
	}
	var g checkpoint.Group // a nil *distributed.Group would not be a nil Group
	if j.pg != nil {
		g = j.pg
	}
	resumed, err := checkpoint.ResumeFrom(ctx, g, j.cfg.Save, &j.ckpt)
	if err != nil {
		return fmt.Errorf("mnistjob: resuming: %w", err)
	}
	if !resumed {
		j.log.Info("no checkpoint yet; starting fresh", "checkpoint", j.cfg.Save)
		return nil
	}
	if err := j.sampler.Restore(j.extra.Sampler); err != nil {
		return fmt.Errorf("mnistjob: resuming the sampler from %s: %w", j.cfg.Save, err)
	}
	// An elastic job resumes in a world of another size: the sampler has
	// re-sharded the epoch's rest, and a learning rate scaled to the
	// world follows it (the schedule's decay so far is kept).
	if was := j.extra.Sampler.Replicas; was > 0 && was != j.world {
		if lr := scaledLR(j.cfg, j.world) / scaledLR(j.cfg, was); lr != 1 {
			j.opt.SetLR(j.opt.LR() * lr)
		}
		j.log.Info("resuming in a world of another size", "was", was, "world", j.world, "lr", j.opt.LR())
	}
	j.log.Info("resumed", "checkpoint", j.cfg.Save, "epoch", j.ckpt.Epoch, "step", j.ckpt.Step)
	return nil
}

// checkpoint has rank 0 save the model and the training sidecar, from
// which a run resumes at epoch.
func (j *job) checkpoint(epoch int) error {
	if j.rank != 0 || j.cfg.Save == "" {
		return nil
	}
	j.extra.Sampler = j.sampler.State()
	j.ckpt.Epoch = epoch
	return checkpoint.SaveTraining(j.cfg.Save, j.ckpt)
}

// evaluate returns the model's accuracy on the test set, in eval mode,
// and puts it back in training mode.
func (j *job) evaluate() float64 {
	nn.SetTrain(j.model, false)
	defer nn.SetTrain(j.model, true)
	// Batches of 200 bound the CNN's im2col memory in eval.
	loader := data.NewLoader(j.testSet, 200, data.NewSequentialSampler(j.testSet.Len()))
	correct := 0
	tensor.NoGrad(func() {
		j.inPrecision(func() {
			for b := range loader.Batches() {
				for i, p := range tensor.ArgMax(j.model.Forward(b.X), 1) {
					if p == b.Y[i] {
						correct++
					}
				}
			}
		})
	})
	return float64(correct) / float64(j.testSet.Len())
}

// inPrecision runs f with the matmuls and convolutions in the job's
// precision (Config.Precision, checked by validate).
func (j *job) inPrecision(f func()) {
	if j.cfg.Precision != "bf16" && j.cfg.Precision != "bf16-emulated" {
		f()
		return
	}
	if err := tensor.Autocast(tensor.BF16, f); err != nil {
		// validate and Run made BF16 available; losing it is a bug.
		panic(fmt.Sprintf("mnistjob: %v", err))
	}
}
