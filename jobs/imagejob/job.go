// Package imagejob is the image classification job that `gotrain train
// images DIR` runs: a ResNet trained with DDP on a folder of PNG and JPEG
// images (a subfolder per class, as torchvision's ImageFolder), with the
// validation accuracy after each epoch. It is the model, the data, the
// loss and the evaluation; package harness is the rest (the process
// group, DDP, the loop's bookkeeping, checkpoints and resuming, progress,
// metrics and the summary).
//
// The training images get the CIFAR augmentation (RandomCrop with a
// padding of an eighth of the size, RandomHorizontalFlip), drawn per
// (seed, epoch, image): a resumed run, and any number of ranks, see the
// augmentation an uninterrupted run sees.
package imagejob

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/data/images"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// The optimizer's settings besides the learning rate: the common CIFAR
// ResNet recipe.
const (
	momentum    = 0.9
	weightDecay = 5e-4
)

// mean and std normalise the images: ImageNet's channel statistics, as
// torchvision's pretrained ResNets expect, and close to most photo
// datasets' (CIFAR-10's are within 0.03).
var (
	mean = []float64{0.485, 0.456, 0.406}
	std  = []float64{0.229, 0.224, 0.225}
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
	TrainLoss     float64 // mean of the last epoch's steps, all ranks
	// ValAccuracy is after the last epoch; 0 on ranks other than 0 and
	// NaN without validation images.
	ValAccuracy float64
	PeakRSSMiB  float64
	Profile     harness.Profile
}

// Summary is the `key=value` line rank 0 prints last.
func (r Result) Summary() string { return r.summary().Line() }

func (r Result) summary() event.Summary {
	var s event.Summary
	s.Add("model", "%s", r.Model)
	s.Add("world", "%d", r.World)
	s.Add("epochs", "%d", r.Epochs)
	s.Add("samples_per_s", "%.0f", r.SamplesPerSec)
	s.Add("train_loss", "%.4f", r.TrainLoss)
	if math.IsNaN(r.ValAccuracy) {
		s.Add("val_accuracy", "%s", "none")
	} else {
		s.Add("val_accuracy", "%.4f", r.ValAccuracy)
	}
	s.Add("peak_rss_mib", "%.0f", r.PeakRSSMiB)
	return s
}

// job is the run's model, data and optimizer: the harness.Task.
type job struct {
	cfg     Config
	run     *harness.Run
	model   nn.Module     // the replica: what is evaluated and saved
	replica harness.Model // model, or its DDP wrapper: what is trained

	classes  []string
	train    *images.Folder
	val      *images.Folder // nil without validation, and on ranks other than 0
	sampler  epochSampler
	loader   *data.Loader
	opt      optim.Optimizer
	sched    optim.Scheduler
	accuracy float64 // of the last evaluation; NaN without one
}

// epochSampler is the training set's sampler: each pass tells the Folder
// the epoch it is for, so that its random transforms are drawn for that
// epoch (after a resume too, whose Restore sets the epoch).
type epochSampler struct {
	*data.DistributedSampler
	folder *images.Folder
}

// AppendIndices sets the Folder's epoch, then begins the pass. The
// Loader calls it before it loads the pass's first example.
func (s epochSampler) AppendIndices(dst []int) []int {
	s.folder.SetEpoch(s.Epoch())
	return s.DistributedSampler.AppendIndices(dst)
}

// Run trains on this process's share of the images, as one rank of a
// job if cfg (or the environment, see harness.Config.InitMethod) names
// one, and has rank 0 report the summary (see harness.Run.Report). It
// returns the first error of the environment (config, data, a peer,
// ctx).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, fmt.Errorf("imagejob: %w", err)
	}
	cfg = cfg.withDefaults()
	r, err := harness.Start(ctx, cfg.Config)
	if err != nil {
		return Result{}, fmt.Errorf("imagejob: %w", err)
	}
	defer r.Close()
	j := &job{cfg: cfg, run: r, accuracy: math.NaN()}
	if err := j.loadData(); err != nil {
		return Result{}, err
	}
	if err := j.buildModel(ctx); err != nil {
		return Result{}, err
	}
	j.opt = optim.NewSGD(j.replica.Parameters(), cfg.LR, optim.Momentum(momentum), optim.WeightDecay(weightDecay))
	j.sched = optim.NewCosineAnnealingLR(j.opt, cfg.Epochs, 0)
	loop := harness.Loop{Data: j.loader, Sampler: j.sampler, Epochs: cfg.Epochs, MaxSteps: cfg.MaxSteps,
		State: &checkpoint.TrainingState{Model: j.model, Optimizer: j.opt, Scheduler: j.sched}}
	if _, err := r.Resume(ctx, &loop); err != nil {
		return Result{}, fmt.Errorf("imagejob: %w", err)
	}
	stats, err := r.Train(ctx, j, loop)
	if err != nil {
		return Result{}, err
	}
	res := Result{Model: cfg.Model, World: stats.World, Rank: stats.Rank, Epochs: stats.Epochs, Steps: stats.Steps,
		SamplesPerSec: stats.Throughput, TrainLoss: stats.TrainLoss, ValAccuracy: j.accuracy,
		PeakRSSMiB: stats.PeakRSSMiB, Profile: stats.Profile}
	if stats.Rank != 0 {
		res.ValAccuracy = 0
	}
	return res, r.Report(res.summary())
}

// transforms are the training and the validation pipelines.
func (c Config) transforms() (train, val []images.Transform) {
	s := c.ImageSize
	train = []images.Transform{images.Resize(s, s), images.RandomCrop(s, max(s/8, 1)),
		images.RandomHorizontalFlip(0.5), images.ToTensor(), images.Normalize(mean, std)}
	val = []images.Transform{images.Resize(s, s), images.ToTensor(), images.Normalize(mean, std)}
	return train, val
}

// loadData reads the image folders, splits off the validation images
// if asked, and gives this rank its shard of the training images. Only
// the ranks that evaluate (rank 0, every rank under sharding) read a
// validation folder.
func (j *job) loadData() error {
	c := j.cfg
	c.Workers = c.decodeWorkers()
	trainTs, valTs := c.transforms()
	opts := func(ts []images.Transform) []images.Option {
		return []images.Option{images.Transforms(ts...), images.Seed(c.Seed), images.Workers(c.Workers),
			images.CacheBytes(int64(*c.CacheMiB) << 20)}
	}
	all, err := images.NewFolder(c.Dir, opts(trainTs)...)
	if err != nil {
		return fmt.Errorf("imagejob: %w", err)
	}
	j.classes, j.train = all.Classes(), all
	// Under sharding every rank runs the evaluation's forward passes.
	evaluates := j.run.Rank() == 0 || c.Sharding != "" && c.Sharding != harness.ShardNone
	switch {
	case c.ValDir != "" && evaluates:
		if j.val, err = images.NewFolder(c.ValDir, opts(valTs)...); err != nil {
			return fmt.Errorf("imagejob: validation images: %w", err)
		}
		if !slices.Equal(j.val.Classes(), j.classes) {
			return fmt.Errorf("imagejob: %s: classes %q differ from %s's %q", c.ValDir, j.val.Classes(), c.Dir, j.classes)
		}
	case c.ValDir == "" && *c.ValFraction > 0:
		trainIdx, valIdx := split(all.Len(), *c.ValFraction, c.Seed)
		if len(trainIdx) == 0 || len(valIdx) == 0 {
			return fmt.Errorf("imagejob: %s: too few images (%d) to split off a fraction of %v for validation (use --val-fraction 0 for none, or --val)",
				c.Dir, all.Len(), *c.ValFraction)
		}
		j.train = all.Subset(trainIdx)
		if evaluates {
			if j.val, err = all.Subset(valIdx).WithTransforms(valTs...); err != nil {
				return fmt.Errorf("imagejob: %w", err)
			}
		}
	}
	sampler := data.NewDistributedSampler(j.train.Len(), j.run.World(), j.run.Rank(), data.Seed(c.Seed))
	j.sampler = epochSampler{sampler, j.train}
	j.loader = data.NewLoader(j.train, c.BatchSize, j.sampler, data.Workers(c.Workers))
	j.run.Logger().Info("images", "dir", c.Dir, "classes", len(j.classes), "train", j.train.Len(),
		"validation", valLen(j.val), "cached", all.Cached(), "workers", c.Workers)
	return nil
}

func valLen(f *images.Folder) int {
	if f == nil {
		return 0
	}
	return f.Len()
}

// split deals the n image indices into training and validation at
// random, by seed (the same on every rank): round(fraction·n) for
// validation, both in increasing order.
func split(n int, fraction float64, seed uint64) (train, val []int) {
	perm := rand.New(rand.NewPCG(seed, 0x696d61676573)).Perm(n)
	k := int(math.Round(fraction * float64(n)))
	val, train = slices.Clone(perm[:k]), slices.Clone(perm[k:])
	slices.Sort(val)
	slices.Sort(train)
	return train, val
}

// buildModel makes the ResNet from the seed, the same on every rank, and
// wraps it for training: in DDP when there is a group.
func (j *job) buildModel(ctx context.Context) error {
	n := len(j.classes)
	nn.Seeded(j.cfg.Seed, func() {
		switch j.cfg.Model {
		case "resnet18":
			j.model = models.ResNet18(n, j.cfg.Stem)
		case "resnet34":
			j.model = models.ResNet34(n, j.cfg.Stem)
		case "resnet50":
			j.model = models.ResNet50(n, j.cfg.Stem)
		default:
			panic("imagejob: buildModel: model " + j.cfg.Model + " passed check")
		}
	})
	var err error
	if j.replica, err = j.run.Wrap(ctx, j.model); err != nil {
		return fmt.Errorf("imagejob: %w", err)
	}
	return nil
}

// Step is the PyTorch DDP step on batch b.
func (j *job) Step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
	// An image that failed to decode is zeros in b: stop before
	// training on it.
	if err := j.train.Err(); err != nil {
		return 0, fmt.Errorf("imagejob: %w", err)
	}
	j.opt.ZeroGrad()
	var loss *tensor.Tensor
	j.run.Autocast(func() { loss = nn.CrossEntropy(j.replica.Forward(b.X), b.Y) })
	s.Forwarded()
	if err := loss.Backward(); err != nil {
		return 0, err
	}
	s.Backwarded()
	l := float64(loss.Item())
	update, err := s.Update(ctx, l, 0)
	if err != nil {
		return 0, err
	}
	if update {
		j.opt.Step()
	}
	return l, nil
}

// EndEpoch steps the cosine schedule.
func (j *job) EndEpoch(int) { j.sched.Step() }

// Evaluate returns the model's accuracy on the validation images, in
// eval mode, and puts it back in training mode; nothing without them.
func (j *job) Evaluate(context.Context) ([]harness.Metric, error) {
	if j.val == nil {
		return nil, nil
	}
	nn.SetTrain(j.model, false)
	defer nn.SetTrain(j.model, true)
	loader := data.NewLoader(j.val, j.cfg.BatchSize, data.NewSequentialSampler(j.val.Len()), data.Workers(j.cfg.decodeWorkers()))
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
	if err := j.val.Err(); err != nil {
		return nil, fmt.Errorf("imagejob: validation images: %w", err)
	}
	j.accuracy = float64(correct) / float64(j.val.Len())
	return []harness.Metric{{Name: "val_accuracy", Value: j.accuracy}}, nil
}
