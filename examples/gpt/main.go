// Command gpt trains a byte-level GPT with DistributedDataParallel, written
// as a user would write it with gotrain's public packages: nanoGPT's
// training script in Go.
//
// It joins the process group (env:// under `gotrain run`, torchrun or a
// Kubernetes PyTorchJob; alone without WORLD_SIZE), builds nanoGPT's model
// (models.GPT), wraps it in DDP, cuts a UTF-8 corpus into windows whose
// targets are the next bytes and gives each rank its shard with a
// DistributedSampler, and trains with the usual transformer recipe: AdamW
// with weight decay on the weight matrices only, a linear warm-up then
// cosine decay stepped per batch, gradient clipping after the averaged
// gradients are in place. Rank 0 prints the validation loss every
// -eval-every steps, saves the model (loadable by nanoGPT's GPT in
// PyTorch) and prints a sample. `gotrain train gpt` is the same recipe,
// built in (jobs/gptjob).
//
//	go build -o gpt-example ./examples/gpt
//	gotrain run --nproc-per-node 2 ./gpt-example -max-steps 200 -save gpt.safetensors
//
// Rank 0's last line, the only one on its stdout, is a summary:
//
//	model=gpt world=2 steps=200 train_loss=… val_loss=…
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
	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// options are the command line.
type options struct {
	nLayer, nHead, nEmbd, block int
	batch, steps, warmup        int
	lr                          float64
	evalEvery, sample           int
	data, save                  string
}

func main() {
	var o options
	flag.IntVar(&o.nLayer, "n-layer", 4, "transformer blocks")
	flag.IntVar(&o.nHead, "n-head", 4, "attention heads")
	flag.IntVar(&o.nEmbd, "n-embd", 128, "model width")
	flag.IntVar(&o.block, "block-size", 128, "context length in bytes")
	flag.IntVar(&o.batch, "batch-size", 32, "windows per rank per step")
	flag.IntVar(&o.steps, "max-steps", 1000, "optimizer steps")
	flag.IntVar(&o.warmup, "warmup-steps", 100, "steps of linear warm-up")
	flag.Float64Var(&o.lr, "lr", 1e-3, "peak learning rate")
	flag.IntVar(&o.evalEvery, "eval-every", 100, "validation loss every N steps")
	flag.IntVar(&o.sample, "sample", 200, "bytes to generate at the end")
	flag.StringVar(&o.data, "data", "", "UTF-8 text file (default: the Go sources shipped in gotrain)")
	flag.StringVar(&o.save, "save", "", "rank 0 saves the model here (safetensors)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if r := os.Getenv("RANK"); r != "" {
		log = log.With("rank", r)
	}
	slog.SetDefault(log)
	// `gotrain run` forwards SIGINT and SIGTERM: stop cleanly on either.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := train(ctx, o); err != nil {
		slog.Error("gpt: training failed", "err", err)
		os.Exit(1)
	}
}

func train(ctx context.Context, o options) error {
	// 1. The process group, when started as one of several ranks.
	world, rank := 1, 0
	var pg *distributed.Group
	if os.Getenv("WORLD_SIZE") != "" && os.Getenv("WORLD_SIZE") != "1" {
		var err error
		if pg, err = distributed.Init(ctx, distributed.Config{InitMethod: "env://"}); err != nil {
			return err
		}
		defer pg.Destroy()
		world, rank = pg.Size(), pg.Rank()
	}

	// 2. The data: byte tokens, 90% for training (a window at every
	// position, each rank its shard), the rest for validation.
	corpus := gotext.Corpus()
	if o.data != "" {
		var err error
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
	sampler := data.NewDistributedSampler(trainSet.Len(), world, rank, data.Seed(1))
	loader := data.NewSequenceLoader(trainSet, o.batch, sampler, data.DropLast(true))

	// 3. The model, the same on every rank; DDP broadcasts rank 0's
	// weights and averages the gradients in Backward.
	nn.SetSeed(1)
	model := models.GPT(models.GPTConfig{VocabSize: tok.VocabSize(), BlockSize: o.block,
		NLayer: o.nLayer, NHead: o.nHead, NEmbd: o.nEmbd, Bias: true})
	forward, params := model.Forward, nn.Parameters(model)
	if pg != nil {
		dm, err := ddp.New(ctx, model, pg)
		if err != nil {
			return err
		}
		defer dm.Close()
		forward, params = dm.Forward, dm.Parameters()
	}

	// 4. AdamW: weight decay on matrices and embeddings, none on biases
	// and LayerNorm weights; warm-up then cosine decay, per batch.
	var decay, noDecay []*tensor.Tensor
	for _, p := range params {
		if p.Dim() >= 2 {
			decay = append(decay, p)
		} else {
			noDecay = append(noDecay, p)
		}
	}
	opt := optim.NewAdamW(decay, o.lr, optim.Betas(0.9, 0.95), optim.WeightDecay(0.1))
	opt.AddParamGroup(noDecay, optim.WeightDecay(0))
	warm := optim.NewLinearLR(opt, 0.01, 1, max(o.warmup, 1))
	cos := optim.NewCosineAnnealingLR(opt, max(o.steps-o.warmup, 1), o.lr/10)
	sched := optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{max(o.warmup, 1)})

	// 5. The loop.
	step, trainLoss, valLoss := 0, 0.0, 0.0
	for epoch := 0; step < o.steps; epoch++ {
		sampler.SetEpoch(epoch)
		for b := range loader.Batches() {
			if err := ctx.Err(); err != nil {
				return err
			}
			opt.ZeroGrad()
			logits := forward(nn.IDTensor(b.Inputs, b.Len(), b.T)) // [B, T, 256]
			loss := tensor.CrossEntropyIgnore(logits, b.Targets, models.IgnoreIndex, "mean")
			if err := loss.Backward(); err != nil { // a failed allreduce surfaces here
				return err
			}
			optim.ClipGradNorm(params, 1.0) // on the averaged gradients
			opt.Step()
			sched.Step()
			step++
			trainLoss = float64(loss.Item())
			if rank == 0 && (step%o.evalEvery == 0 || step == o.steps) {
				valLoss = evaluate(model, validSet, o.batch)
				fmt.Fprintf(os.Stderr, "step %d: train_loss=%.4f val_loss=%.4f lr=%.3g\n", step, trainLoss, valLoss, opt.LR())
			}
			if step == o.steps {
				break
			}
		}
	}

	// 6. Rank 0 saves and samples.
	if rank != 0 {
		return nil
	}
	if o.save != "" {
		if err := checkpoint.Save(o.save, model); err != nil {
			return err
		}
	}
	if o.sample > 0 {
		fmt.Fprintf(os.Stderr, "sample:\n%s\n", text.Printable(generate(model, tok, o.sample)))
	}
	fmt.Printf("model=gpt world=%d steps=%d train_loss=%.4f val_loss=%.4f\n", world, step, trainLoss, valLoss)
	return nil
}

// evaluate is the mean loss over up to 20 batches of validation windows.
func evaluate(model *models.GPTModel, ds *data.TokenWindows, batch int) float64 {
	nn.SetTrain(model, false)
	defer nn.SetTrain(model, true)
	var sum float64
	n := 0
	tensor.NoGrad(func() {
		for b := range data.NewSequenceLoader(ds, batch, data.NewSequentialSampler(ds.Len())).Batches() {
			_, loss := model.Loss(b.Inputs, b.Targets, b.Len(), b.T)
			sum += float64(loss.Item())
			if n++; n == 20 {
				break
			}
		}
	})
	return sum / float64(n)
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
