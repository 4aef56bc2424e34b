// Package gptjob is the GPT training job: a byte-level GPT (nanoGPT's
// architecture) trained with DDP on the Go corpus shipped in the binary or
// any UTF-8 text, the program that both `gotrain train gpt` and
// examples/gpt run. It follows the recipe of nanoGPT: AdamW with weight
// decay on the weight matrices only, a linear warm-up then cosine decay
// stepped per batch, gradient clipping, a validation loss every few
// steps, and a sample of generated text at the end.
//
// Config.Precision "bf16" (or "bf16-emulated") runs the forward passes of
// training, evaluation and sampling under tensor.Autocast, as nanoGPT runs
// them under torch.autocast: the matmuls (every Linear, the lm_head
// included, and attention's q, k and v) take bf16 operands with
// float32 sums; the embeddings, LayerNorm, softmax, GELU, the loss, the
// weights and AdamW's moments stay float32.
//
// Run reads as its steps: join the group, build the model, wrap it in
// DDP, load the data, make the optimizer and schedule, resume, train
// (train.go), each a method of job named for what it does.
package gptjob

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/data/text"
	"github.com/gotrain/gotrain/datasets/gotext"
	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// Result summarises a run as this process saw it; only rank 0 evaluates,
// samples and reports.
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

// Summary is the `key=value` line the CLI and the example print last.
func (r Result) Summary() string {
	return fmt.Sprintf("model=gpt world=%d steps=%d tokens_per_s=%.0f train_loss=%.4f val_loss=%.4f peak_rss_mib=%.0f precision=%s",
		r.World, r.Steps, r.TokensPerSec, r.TrainLoss, r.ValLoss, r.PeakRSSMiB, r.Precision)
}

// job is one run's state, built up by Run's steps.
type job struct {
	cfg         Config
	log         *slog.Logger
	pg          *distributed.Group // nil when training alone
	world, rank int

	model   *models.GPTModel // the replica: what is evaluated, sampled and saved
	dm      *ddp.Model       // nil when training alone
	forward func(*tensor.Tensor) *tensor.Tensor
	params  []*tensor.Tensor

	tok          text.ByteTokenizer
	train, valid *data.TokenWindows
	sampler      *data.DistributedSampler
	loader       *data.Loader
	opt          *optim.AdamW
	sched        optim.Scheduler

	ckpt  checkpoint.TrainingState
	extra resumeState
}

// resumeState is what the training sidecar carries besides model,
// optimizer, scheduler and counters.
type resumeState struct {
	Sampler data.SamplerState `json:"sampler"`
}

// Run trains the GPT on this process's share of the corpus, as one rank
// of a job if cfg (or the environment, see Config.InitMethod) names one.
// It returns the first error of the environment (config, data, a peer,
// ctx).
func Run(ctx context.Context, cfg Config) (Result, error) {
	j, err := newJob(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer j.close()
	if j.cfg.Precision == "bf16-emulated" {
		defer tensor.SetBF16Emulation(tensor.SetBF16Emulation(true))
		j.log.Info("bf16 emulated: matmul and attention operands rounded to bf16 in software, multiplied in float32 (bf16 numerics at below-fp32 speed)")
	}
	if err := j.loadData(); err != nil {
		return Result{}, err
	}
	if err := j.resume(ctx); err != nil {
		return Result{}, err
	}
	return j.run(ctx)
}

// newJob resolves cfg and sets up everything but the data: the group, the
// model (DDP-wrapped), the optimizer and the schedule. On error it has
// released what it made.
func newJob(ctx context.Context, cfg Config) (*job, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	j := &job{cfg: cfg, log: cfg.Logger, world: 1}
	if err := j.joinGroup(ctx); err != nil {
		return nil, err
	}
	if err := j.buildModel(); err != nil {
		j.close()
		return nil, err
	}
	if err := j.wrapDDP(ctx); err != nil {
		j.close()
		return nil, err
	}
	j.newOptimizer()
	return j, nil
}

// joinGroup joins the process group if the job has more than one rank.
func (j *job) joinGroup(ctx context.Context) error {
	if j.cfg.InitMethod == "" {
		return nil
	}
	pg, err := distributed.Init(ctx, distributed.Config{InitMethod: j.cfg.InitMethod, Rank: j.cfg.Rank, WorldSize: j.cfg.WorldSize})
	if err != nil {
		return fmt.Errorf("gptjob: joining the process group: %w", err)
	}
	j.pg, j.world, j.rank = pg, pg.Size(), pg.Rank()
	return nil
}

// modelConfig is the GPT the job trains: byte-level, biases on.
func (j *job) modelConfig() models.GPTConfig {
	c := j.cfg
	return models.GPTConfig{VocabSize: j.tok.VocabSize(), BlockSize: c.BlockSize, NLayer: c.NLayer, NHead: c.NHead,
		NEmbd: c.NEmbd, Dropout: float32(c.Dropout), Bias: true}
}

// buildModel makes the model from the seed, the same on every rank, or
// loads its initial weights from cfg.Init.
func (j *job) buildModel() error {
	nn.SetSeed(j.cfg.Seed)
	j.model = models.GPT(j.modelConfig())
	if j.cfg.Init != "" {
		if err := checkpoint.Load(j.cfg.Init, j.model); err != nil {
			return fmt.Errorf("gptjob: initial weights: %w", err)
		}
	}
	j.forward, j.params = j.model.Forward, nn.Parameters(j.model)
	return nil
}

// wrapDDP wraps the model in DDP when there is a group: New checks that
// every rank built the same model and copies rank 0's weights to all;
// each Backward then averages the gradients.
func (j *job) wrapDDP(ctx context.Context) error {
	if j.pg == nil {
		return nil
	}
	dm, err := ddp.New(ctx, j.model, j.pg, ddp.GradientAsBucketView(true))
	if err != nil {
		return fmt.Errorf("gptjob: wrapping the model in DDP: %w", err)
	}
	j.dm, j.forward, j.params = dm, dm.Forward, dm.Parameters()
	return nil
}

// inPrecision runs f with the matmuls in the job's precision
// (Config.Precision, checked by validate): under tensor.Autocast for bf16,
// whose ops record it, so that their backward, run after f returns,
// rounds as their forward did.
func (j *job) inPrecision(f func()) {
	if j.cfg.Precision != "bf16" && j.cfg.Precision != "bf16-emulated" {
		f()
		return
	}
	if err := tensor.Autocast(tensor.BF16, f); err != nil {
		// validate and Run made BF16 available; losing it is a bug.
		panic(fmt.Sprintf("gptjob: %v", err))
	}
}

// close releases DDP, then the group.
func (j *job) close() {
	if j.dm != nil {
		j.dm.Close()
	}
	if j.pg != nil {
		j.pg.Destroy()
	}
}

// validFraction is the corpus's tail held out for the validation loss,
// as nanoGPT's 90/10 split.
const validFraction = 0.1

// loadData reads the corpus, splits it 90/10 into training windows (one
// per position, shuffled and sharded across ranks each epoch) and
// non-overlapping validation windows.
func (j *job) loadData() error {
	name, corpus, err := readCorpus(j.cfg.Data)
	if err != nil {
		return err
	}
	if j.train, j.valid, err = windows(name, corpus, j.cfg.BlockSize); err != nil {
		return err
	}
	j.sampler = data.NewDistributedSampler(j.train.Len(), j.world, j.rank, data.Seed(j.cfg.Seed))
	j.loader = data.NewSequenceLoader(j.train, j.cfg.BatchSize, j.sampler, data.DropLast(true))
	if j.loader.Len() == 0 {
		return fmt.Errorf("gptjob: %s has %d training windows for %d ranks, fewer than one batch of %d each", name, j.train.Len(), j.world, j.cfg.BatchSize)
	}
	j.log.Info("data", "corpus", name, "bytes", len(corpus), "train_windows", j.train.Len(), "valid_windows", j.valid.Len(),
		"params", j.model.NumParams(false), "precision", j.cfg.Precision)
	return nil
}

// CheckData returns the error a job would stop with on the corpus at path
// ("" for the shipped one) with windows of blockSize bytes: a file that
// cannot be read, is empty or is not UTF-8, or too short a text. A
// launcher checks it once before starting workers.
func CheckData(path string, blockSize int) error {
	name, corpus, err := readCorpus(path)
	if err == nil {
		_, _, err = windows(name, corpus, blockSize)
	}
	return err
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
		return nil, nil, fmt.Errorf("gptjob: %s (%d bytes) is too short for the block size %d: its last %.0f%%, held out for validation, must hold a window of %d bytes and its next byte",
			name, len(corpus), T, validFraction*100, T)
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
	var decay, noDecay []*tensor.Tensor
	for _, p := range j.params {
		if p.Dim() >= 2 {
			decay = append(decay, p)
		} else {
			noDecay = append(noDecay, p)
		}
	}
	c := j.cfg
	j.opt = optim.NewAdamW(decay, c.LR, optim.Betas(c.Beta1, c.Beta2), optim.WeightDecay(c.WeightDecay))
	j.opt.AddParamGroup(noDecay, optim.WeightDecay(0))
	j.sched = newSchedule(j.opt, c)
	j.ckpt = checkpoint.TrainingState{Model: j.model, Optimizer: j.opt, Scheduler: j.sched, Extra: &j.extra}
}

// newSchedule is the warm-up and cosine decay over c.MaxSteps.
func newSchedule(opt optim.Optimizer, c Config) optim.Scheduler {
	cosSteps := max(c.MaxSteps-c.WarmupSteps, 1)
	if c.WarmupSteps == 0 {
		return optim.NewCosineAnnealingLR(opt, cosSteps, c.MinLR)
	}
	warm := optim.NewLinearLR(opt, 0.01, 1, c.WarmupSteps)
	cos := optim.NewCosineAnnealingLR(opt, cosSteps, c.MinLR)
	return optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{c.WarmupSteps})
}

// resume loads rank 0's last training checkpoint on every rank, if asked
// and if rank 0 has one.
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
		return fmt.Errorf("gptjob: resuming: %w", err)
	}
	if !resumed {
		j.log.Info("no checkpoint yet; starting fresh", "checkpoint", j.cfg.Save)
		return nil
	}
	if err := j.sampler.Restore(j.extra.Sampler); err != nil {
		return fmt.Errorf("gptjob: resuming the sampler from %s: %w", j.cfg.Save, err)
	}
	j.log.Info("resumed", "checkpoint", j.cfg.Save, "epoch", j.ckpt.Epoch, "step", j.ckpt.Step)
	return nil
}

// checkpoint has rank 0 save the model and the training sidecar.
func (j *job) checkpoint() error {
	if j.rank != 0 || j.cfg.Save == "" {
		return nil
	}
	j.extra.Sampler = j.sampler.State()
	return checkpoint.SaveTraining(j.cfg.Save, j.ckpt)
}
