// Package gptjob is the GPT training job that `gotrain train gpt` runs: a
// GPT (nanoGPT's architecture) trained with DDP, byte-level on the Go
// corpus shipped in the binary or any UTF-8 text, or on the token shards
// of a dataset prepared by `gotrain data prepare` (package shards),
// memory-mapped, with that dataset's vocabulary. It follows the recipe
// of nanoGPT: AdamW with weight decay on the weight matrices only, a
// linear warm-up then cosine decay stepped per batch, gradient clipping,
// a validation loss every few steps, and a sample of generated text at
// the end. It is the model, the data, the loss, the evaluation and the
// sampling; package harness is the rest (the process group, DDP, the
// loop's bookkeeping, checkpoints and resuming, progress, metrics and the
// summary).
//
// Precision "bf16" (or "bf16-emulated") runs the forward passes of
// training, evaluation and sampling under tensor.Autocast, as nanoGPT runs
// them under torch.autocast: the matmuls (every Linear, the lm_head
// included, and attention's q, k and v) take bf16 operands with float32
// sums; the embeddings, LayerNorm, softmax, GELU, the loss, the weights
// and AdamW's moments stay float32.
//
// Run reads as its steps: start the harness run and build the model
// (newJob), load the data, train, sample; job is the harness.Task, its
// Step nanoGPT's training step (train.go).
package gptjob

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/data/text"
	"github.com/gotrain/gotrain/datasets/gotext"
	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/jobs/jobflag"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// Result summarises a run as this process saw it; only rank 0 evaluates,
// samples and reports (under sharding every rank runs the evaluation and
// the sampling, and rank 0's are reported).
type Result struct {
	World        int
	Rank         int
	Precision    string  // what the matmuls ran in: fp32, bf16 or bf16-emulated
	Steps        int     // taken in this run (after a resume: since it)
	TokensPerSec float64 // all ranks, over the steps after the first 5
	TrainLoss    float64 // mean over the ranks' steps of the last evaluation interval
	ValLoss      float64 // at the end; 0 on ranks other than 0
	PeakRSSMiB   float64
	Sample       string // the generated text (rank 0, with Config.Sample)
}

// Summary is the `key=value` line rank 0 prints last.
func (r Result) Summary() string { return r.summary().Line() }

// summary is the summary rank 0 reports: the sample, if any, then the
// line.
func (r Result) summary() event.Summary {
	var s event.Summary
	s.Add("model", "%s", "gpt")
	s.Add("world", "%d", r.World)
	s.Add("steps", "%d", r.Steps)
	s.Add("tokens_per_s", "%.0f", r.TokensPerSec)
	s.Add("train_loss", "%.4f", r.TrainLoss)
	s.Add("val_loss", "%.4f", r.ValLoss)
	s.Add("peak_rss_mib", "%.0f", r.PeakRSSMiB)
	s.Add("precision", "%s", r.Precision)
	if r.Sample != "" {
		s.Text = "sample:\n" + strings.TrimRight(text.Printable(r.Sample), "\n") + "\n"
	}
	return s
}

// job is the run's model, data and optimizer: the harness.Task.
type job struct {
	cfg     Config
	run     *harness.Run
	log     *slog.Logger
	model   *models.GPTModel // the replica: what is evaluated, sampled and saved
	replica harness.Model    // model, or its DDP wrapper: what is trained
	psgd    *ddp.PowerSGD    // with CommHook "powersgd" in a group: the hook, whose state is checkpointed
	params  []*tensor.Tensor

	data         *corpus
	train, valid data.SequenceDataset
	tok          decoder // decodes the sample
	sampler      harness.Sampler
	loader       *data.Loader
	opt          *optim.AdamW
	sched        optim.Scheduler
	valLoss      float64 // of the last evaluation
}

// Run trains the GPT on this process's share of the corpus, as one rank
// of a job if cfg (or the environment, see harness.Config.InitMethod)
// names one, and has rank 0 report the summary (see harness.Run.Report).
// It returns the first error of the environment (config, data, a peer,
// ctx).
func Run(ctx context.Context, cfg Config) (Result, error) {
	j, err := newJob(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer j.close()
	if err := j.loadData(); err != nil {
		return Result{}, err
	}
	state := &checkpoint.TrainingState{Model: j.model, Optimizer: j.opt, Scheduler: j.sched}
	if j.psgd != nil {
		state.CommHook = j.psgd
	}
	stats, err := j.run.Train(ctx, j, harness.Loop{Data: j.loader, Sampler: j.sampler,
		State: state, Steps: j.cfg.MaxSteps, EvalEvery: j.cfg.EvalEvery, Tokens: true})
	if err != nil {
		return Result{}, err
	}
	res := Result{World: stats.World, Rank: stats.Rank, Precision: j.run.Precision(), Steps: stats.Steps,
		TokensPerSec: stats.Throughput, TrainLoss: stats.TrainLoss, ValLoss: j.valLoss, PeakRSSMiB: stats.PeakRSSMiB}
	if res.Rank != 0 {
		res.ValLoss = 0 // evaluated under sharding, not reported
	}
	if j.cfg.Sample > 0 && (res.Rank == 0 || j.run.Sharding() != "") {
		// Under sharding every rank runs the model for rank 0's sample.
		err := j.run.WithModel(ctx, func() error {
			s, err := j.generate(j.cfg.Sample)
			if res.Rank == 0 {
				res.Sample = s
			}
			return err
		})
		if err != nil {
			return res, err
		}
	}
	return res, j.run.Report(res.summary())
}

// newJob checks cfg and sets up everything but the data: the harness run
// (the group), the model (wrapped for training), the optimizer and the
// schedule. On error it has released what it made.
func newJob(ctx context.Context, cfg Config) (*job, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("gptjob: %w", err)
	}
	cfg = cfg.withDefaults()
	r, err := harness.Start(ctx, cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("gptjob: %w", err)
	}
	j := &job{cfg: cfg, run: r, log: r.Logger()}
	if j.data, err = openCorpus(cfg.Data, cfg.BlockSize, j.nodeLocal(ctx)); err != nil {
		j.close()
		return nil, err
	}
	if err := j.buildModel(ctx); err != nil {
		j.close()
		return nil, err
	}
	j.newOptimizer()
	return j, nil
}

// close ends the harness run (DDP, then the group) and unmaps the data.
func (j *job) close() {
	_ = j.run.Close()
	if j.data != nil {
		_ = j.data.close()
	}
}

// modelConfig is the GPT the job trains: the data's vocabulary (256
// bytes for text), biases on.
func (j *job) modelConfig() models.GPTConfig {
	c := j.cfg
	return models.GPTConfig{VocabSize: j.data.vocab, BlockSize: c.BlockSize, NLayer: c.NLayer, NHead: c.NHead,
		NEmbd: c.NEmbd, Dropout: float32(c.Dropout), Bias: true}
}

// buildModel makes the model from the seed, the same on every rank, or
// loads its initial weights from cfg.Init, and wraps it for training.
func (j *job) buildModel(ctx context.Context) error {
	nn.Seeded(j.cfg.Seed, func() { j.model = models.GPT(j.modelConfig()) })
	j.model.ActivationCheckpointing = j.cfg.ActivationCheckpointing
	if j.cfg.Init != "" {
		if err := checkpoint.Load(j.cfg.Init, j.model); err != nil {
			return fmt.Errorf("gptjob: initial weights: %w", err)
		}
	}
	hook, psgd, err := jobflag.CommHook(j.cfg.CommHook, j.cfg.PowerSGD, j.run.World())
	if err != nil {
		return fmt.Errorf("gptjob: %w", err)
	}
	j.psgd = psgd // its state goes into checkpoints
	if j.replica, err = j.run.Wrap(ctx, j.model, hook); err != nil {
		return fmt.Errorf("gptjob: %w", err)
	}
	j.params = j.replica.Parameters()
	return nil
}

// validFraction is the corpus's tail held out for the validation loss,
// as nanoGPT's 90/10 split.
const validFraction = 0.1

// loadData makes the loader of the training windows (of a text, split
// 90/10: one per position; of a prepared dataset's train split: see
// openShards), shuffled and sharded across ranks each epoch, and loads
// the tokenizer that decodes the sample.
func (j *job) loadData() error {
	j.train, j.valid = j.data.train, j.data.valid
	name := j.data.name
	if j.cfg.Sample > 0 {
		var err error
		if j.tok, err = j.data.sampleTokenizer(); err != nil {
			return err
		}
	}
	world := j.run.World()
	if j.sampler = j.data.sampler; j.sampler == nil {
		j.sampler = data.NewDistributedSampler(j.train.Len(), world, j.run.Rank(), data.Seed(j.cfg.Seed))
	}
	j.loader = data.NewSequenceLoader(j.train, j.cfg.BatchSize, j.sampler, data.DropLast(true))
	if j.loader.Len() == 0 {
		return fmt.Errorf("gptjob: %s has %d training windows for %d ranks, fewer than one batch of %d each", name, j.train.Len(), world, j.cfg.BatchSize)
	}
	j.log.Info("data", "corpus", name, "vocab", j.data.vocab, "train_tokens", j.data.tokens, "train_windows", j.train.Len(), "valid_windows", j.valid.Len(),
		"params", j.model.NumParams(false), "precision", j.run.Precision())
	return nil
}

// CheckData returns the error a job would stop with on the data at path
// ("" for the shipped corpus) with windows of blockSize tokens: a file
// that cannot be read, a *text.CorpusError for one that is empty, is not
// UTF-8 or is too short, a prepared dataset that is not well-formed or
// has no window. A launcher checks it once before starting workers.
func CheckData(path string, blockSize int) error {
	c, err := openCorpus(path, blockSize, nil)
	if err != nil {
		return err
	}
	return c.close()
}

// readCorpus returns the text at path, or the shipped corpus for "", and
// its name for messages.
func readCorpus(path string) (name, corpus string, err error) {
	if path == "" {
		return gotext.Name, gotext.Corpus(), nil
	}
	if corpus, err = text.ReadCorpus(path); err != nil {
		return "", "", fmt.Errorf("gptjob: %w", err)
	}
	return path, corpus, nil
}

// windows splits corpus into its training windows (the first 90%, one per
// position) and validation windows (the rest, non-overlapping).
func windows(name, corpus string, T int) (train, valid *data.TokenWindows, err error) {
	var tok text.ByteTokenizer
	tokens := tok.Encode(corpus)
	split := len(tokens) - int(float64(len(tokens))*validFraction)
	if len(tokens)-split < T+1 {
		return nil, nil, fmt.Errorf("gptjob: %w", &text.CorpusError{Name: name, Problem: fmt.Sprintf(
			"(%d bytes) is too short for the block size %d: its last %.0f%%, held out for validation, must hold a window of %d bytes and its next byte",
			len(corpus), T, validFraction*100, T)})
	}
	if train, err = data.NewTokenWindows(tokens[:split], tok.VocabSize(), T, 1); err != nil {
		return nil, nil, fmt.Errorf("gptjob: %s: %w", name, err)
	}
	if valid, err = data.NewTokenWindows(tokens[split:], tok.VocabSize(), T, T); err != nil {
		return nil, nil, fmt.Errorf("gptjob: %s: %w", name, err)
	}
	return train, valid, nil
}

// newOptimizer makes AdamW with weight decay on the weight matrices and
// embeddings (every parameter of two or more dimensions) and none on
// biases and LayerNorm weights, as nanoGPT's configure_optimizers, and the
// schedule: a linear warm-up from LR/100, then cosine decay to MinLR at
// MaxSteps.
func (j *job) newOptimizer() {
	// By the full parameter's dimensions: sharded, each is a flat shard.
	decay, noDecay := j.run.DecayGroups(j.params)
	c := j.cfg
	j.opt = optim.NewAdamW(decay, c.LR, optim.Betas(*c.Beta1, *c.Beta2), optim.WeightDecay(*c.WeightDecay))
	j.opt.AddParamGroup(noDecay, optim.WeightDecay(0))
	j.sched = newSchedule(j.opt, c)
}

// newSchedule is the warm-up and cosine decay over c.MaxSteps; c has its
// defaults.
func newSchedule(opt optim.Optimizer, c Config) optim.Scheduler {
	warmup := *c.WarmupSteps
	cosSteps := max(c.MaxSteps-warmup, 1)
	if warmup == 0 {
		return optim.NewCosineAnnealingLR(opt, cosSteps, *c.MinLR)
	}
	warm := optim.NewLinearLR(opt, 0.01, 1, warmup)
	cos := optim.NewCosineAnnealingLR(opt, cosSteps, *c.MinLR)
	return optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{warmup})
}
