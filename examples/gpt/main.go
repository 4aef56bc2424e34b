// Command gpt trains a byte-level GPT with DistributedDataParallel: a
// training program of your own on gotrain, nanoGPT's training script in
// Go on package harness.
//
// The program is what is its own: nanoGPT's model (models.GPT), the data
// (a UTF-8 corpus cut into windows whose targets are the next bytes, each
// rank its shard through a DistributedSampler), the step (AdamW with
// weight decay on the weight matrices only, a linear warm-up then cosine
// decay stepped per batch, gradient clipping once DDP has averaged the
// gradients) and the evaluation (the validation loss), a harness.Task.
// The harness does the rest: it joins the process group (env:// under
// `gotrain run`, torchrun or a Kubernetes PyTorchJob; alone without
// WORLD_SIZE), wraps the model in DDP, runs the loop, evaluates every
// -eval-every steps, checkpoints with -save (loadable by nanoGPT's GPT in
// PyTorch) and has rank 0 report the summary. Rank 0 then prints a
// sample of generated text.
//
//	go build -o gpt-example ./examples/gpt
//	gotrain run --nproc-per-node 2 ./gpt-example -max-steps 200 -save gpt.safetensors
//
// Progress ("step 120/300 … eval 2/3 … tokens/s ETA …") goes to stderr,
// and every -eval-every steps a line with the training and validation
// losses and the learning rate.
//
// Rank 0's last line, the only one on its stdout, is a summary:
//
//	model=gpt world=2 steps=200 train_loss=… val_loss=… tokens_per_s=… peak_rss_mib=…
//
// Its defaults are a GPT small enough to train in a minute on a laptop;
// `gotrain train gpt` (jobs/gptjob) is the full recipe, built into
// gotrain.
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
	"github.com/gotrain/gotrain/data/text"
	"github.com/gotrain/gotrain/datasets/gotext"
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
	run                         harness.Config
	nLayer, nHead, nEmbd, block int
	batch, steps, warmup        int
	lr                          float64
	evalEvery, sample           int
	data                        string
}

func main() {
	o := options{run: harness.Config{Summary: os.Stdout}}
	flag.IntVar(&o.nLayer, "n-layer", 2, "transformer blocks")
	flag.IntVar(&o.nHead, "n-head", 4, "attention heads")
	flag.IntVar(&o.nEmbd, "n-embd", 64, "model width")
	flag.IntVar(&o.block, "block-size", 64, "context length in bytes")
	flag.IntVar(&o.batch, "batch-size", 16, "windows per rank per step")
	flag.IntVar(&o.steps, "max-steps", 300, "optimizer steps")
	flag.IntVar(&o.warmup, "warmup-steps", 30, "steps of linear warm-up")
	flag.Float64Var(&o.lr, "lr", 2e-3, "peak learning rate")
	flag.IntVar(&o.evalEvery, "eval-every", 100, "validation loss every N steps")
	flag.IntVar(&o.sample, "sample", 200, "bytes to generate at the end")
	flag.StringVar(&o.data, "data", "", "UTF-8 text file (default: the Go sources shipped in gotrain)")
	flag.StringVar(&o.run.Save, "save", "", "rank 0 saves the model here (safetensors), with a training checkpoint beside it")
	flag.BoolVar(&o.run.Resume, "resume", false, "with -save: carry on from the training checkpoint beside it")
	flag.BoolVar(&o.run.Progress, "progress", true, "show progress: the step of the run's total, each evaluation interval, the loss, tokens/s and the ETA (plain lines when stderr is not a terminal)")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	// `gotrain run` forwards SIGINT and SIGTERM: stop cleanly on either.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := train(ctx, o)
	stop()
	if err != nil {
		slog.Error("gpt: training failed", "err", err)
		// 1, or the status that tells the launcher another rank's
		// failure caused this one (so that it names that rank).
		os.Exit(harness.ExitCode(os.Stderr, err))
	}
}

// train is the program: build, train, report, sample.
func train(ctx context.Context, o options) error {
	r, err := harness.Start(ctx, o.run) // joins the group if there is one
	if err != nil {
		return err
	}
	defer r.Close()

	// The data: byte tokens, 90% for training (a window at every
	// position, each rank its shard), the rest for validation.
	corpus := gotext.Corpus()
	if o.data != "" {
		if corpus, err = text.ReadCorpus(o.data); err != nil {
			return err
		}
	}
	tok := text.ByteTokenizer{}
	tokens := tok.Encode(corpus)
	split := len(tokens) * 9 / 10
	trainSet, err := data.NewTokenWindows(tokens[:split], tok.VocabSize(), o.block, 1)
	if err != nil {
		return fmt.Errorf("training split: %w", err)
	}
	validSet, err := data.NewTokenWindows(tokens[split:], tok.VocabSize(), o.block, o.block)
	if err != nil {
		return fmt.Errorf("validation split: %w", err)
	}
	sampler := data.NewDistributedSampler(trainSet.Len(), r.World(), r.Rank(), data.Seed(1))

	// The model, the same on every rank; DDP (with a group) broadcasts
	// rank 0's weights and averages the gradients in Backward.
	nn.SetSeed(1)
	model := models.GPT(models.GPTConfig{VocabSize: tok.VocabSize(), BlockSize: o.block,
		NLayer: o.nLayer, NHead: o.nHead, NEmbd: o.nEmbd, Bias: true})
	m, err := r.Wrap(ctx, model)
	if err != nil {
		return err
	}

	// AdamW: weight decay on matrices and embeddings, none on biases
	// and LayerNorm weights; warm-up then cosine decay, per batch.
	var decay, noDecay []*tensor.Tensor
	for _, p := range m.Parameters() {
		if p.Dim() >= 2 {
			decay = append(decay, p)
		} else {
			noDecay = append(noDecay, p)
		}
	}
	opt := optim.NewAdamW(decay, o.lr, optim.Betas(0.9, 0.95), optim.WeightDecay(0.1))
	opt.AddParamGroup(noDecay, optim.WeightDecay(0))
	warmup := max(o.warmup, 1)
	sched := optim.NewSequentialLR(opt, []optim.Scheduler{optim.NewLinearLR(opt, 0.01, 1, warmup),
		optim.NewCosineAnnealingLR(opt, max(o.steps-warmup, 1), o.lr/10)}, []int{warmup})

	t := &task{model: model, replica: m, opt: opt, sched: sched, valid: validSet, batch: o.batch}
	stats, err := r.Train(ctx, t, harness.Loop{
		Data:      data.NewSequenceLoader(trainSet, o.batch, sampler, data.DropLast(true)),
		Sampler:   sampler,
		State:     &checkpoint.TrainingState{Model: model, Optimizer: opt, Scheduler: sched},
		Steps:     o.steps,
		EvalEvery: o.evalEvery,
		Tokens:    true,
	})
	if err != nil {
		return err
	}
	if r.Rank() == 0 && o.sample > 0 {
		fmt.Fprintf(r.Out(), "sample:\n%s\n", text.Printable(generate(model, tok, o.sample)))
	}
	var s event.Summary
	s.Add("model", "%s", "gpt")
	s.Add("world", "%d", stats.World)
	s.Add("steps", "%d", stats.Steps)
	s.Add("train_loss", "%.4f", stats.TrainLoss)
	s.Add("val_loss", "%.4f", t.valLoss)
	s.Add("tokens_per_s", "%.0f", stats.Throughput)
	s.Add("peak_rss_mib", "%.0f", stats.PeakRSSMiB)
	return r.Report(s) // rank 0's last line
}

// task is what the harness trains: nanoGPT's step and the validation
// loss.
type task struct {
	model   *models.GPTModel // evaluated and sampled on rank 0
	replica harness.Model    // model, or its DDP wrapper: trained
	opt     *optim.AdamW
	sched   optim.Scheduler
	valid   *data.TokenWindows
	batch   int
	valLoss float64
}

// Step is one optimizer step on a batch of windows.
func (t *task) Step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
	t.opt.ZeroGrad()
	logits := t.replica.Forward(nn.IDTensor(b.Inputs, b.Len(), b.T)) // [B, T, 256]
	loss := tensor.CrossEntropyIgnore(logits, b.Targets, models.IgnoreIndex, "mean")
	s.Forwarded()
	if err := loss.Backward(); err != nil { // a failed allreduce surfaces here
		return 0, err
	}
	s.Backwarded()
	norm := optim.ClipGradNorm(t.replica.Parameters(), 1.0) // on the averaged gradients
	l := float64(loss.Item())
	// A NaN or infinite loss or gradient norm stops the run, or skips
	// this update on every rank, as harness.Config.OnNaN says.
	if ok, err := s.Update(ctx, l, norm); err != nil || !ok {
		t.sched.Step()
		return l, err
	}
	t.opt.Step()
	t.sched.Step()
	return l, nil
}

// Evaluate is the mean loss over up to 20 batches of validation windows,
// with the learning rate.
func (t *task) Evaluate(context.Context) ([]harness.Metric, error) {
	nn.SetTrain(t.model, false)
	defer nn.SetTrain(t.model, true)
	var sum float64
	n := 0
	tensor.NoGrad(func() {
		for b := range data.NewSequenceLoader(t.valid, t.batch, data.NewSequentialSampler(t.valid.Len())).Batches() {
			_, loss := t.model.Loss(b.Inputs, b.Targets, b.Len(), b.T)
			sum += float64(loss.Item())
			if n++; n == 20 {
				break
			}
		}
	})
	t.valLoss = sum / float64(n)
	return []harness.Metric{{Name: "val_loss", Value: t.valLoss}, {Name: "lr", Value: t.opt.LR(), Format: "%.3g"}}, nil
}

// generate samples n bytes after a newline at temperature 0.8.
func generate(model *models.GPTModel, tok text.ByteTokenizer, n int) string {
	ids, err := model.Generate([]int{'\n'}, n, 0.8, 0, tensor.NewRNG(2))
	if err != nil {
		panic(err) // '\n' is a byte and 0.8 a temperature: a mistake here
	}
	s, _ := tok.Decode(ids[1:]) // every id is a byte
	return s
}
