package harness_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

func init() { workers["shardeval"] = shardEvalWorker }

// evalGPT is a GPT whose four blocks outweigh its root (embeddings and
// final norm).
var evalGPT = models.GPTConfig{VocabSize: 13, BlockSize: 8, NLayer: 4, NHead: 2, NEmbd: 16}

// gptTask trains evalGPT to predict each token's successor and, in
// Evaluate, records what the module holds while each block runs.
type gptTask struct {
	run   *harness.Run
	m     *models.GPTModel
	model harness.Model
	opt   optim.Optimizer
	test  *data.TensorDataset

	evaluating bool
	evals      int
	maxBlocks  int      // the most blocks holding values while a block ran in Evaluate
	wrong      []string // what Evaluate saw that it should not have
}

// successors returns the next-token targets of the ids in x ([B, T]).
func successors(x *tensor.Tensor) []int {
	t := make([]int, x.Len())
	for i, v := range x.Data() {
		t[i] = (int(v) + 1) % evalGPT.VocabSize
	}
	return t
}

func tokens(n int, seed uint64) *data.TensorDataset {
	rng := tensor.NewRNG(seed)
	x := make([]float32, n*evalGPT.BlockSize)
	for i := range x {
		x[i] = float32(rng.Intn(evalGPT.VocabSize))
	}
	return data.NewTensorDataset(tensor.New(x, n, evalGPT.BlockSize), make([]int, n))
}

func (j *gptTask) Step(_ context.Context, s harness.Step, b data.Batch) (float64, error) {
	j.opt.ZeroGrad()
	loss := tensor.CrossEntropyIgnore(j.model.Forward(b.X), successors(b.X), models.IgnoreIndex, "mean")
	s.Forwarded()
	if err := loss.Backward(); err != nil {
		return 0, err
	}
	s.Backwarded()
	j.opt.Step()
	return float64(loss.Item()), nil
}

// Evaluate runs the module itself, as a program's evaluation does.
func (j *gptTask) Evaluate(context.Context) ([]harness.Metric, error) {
	j.evals++
	j.evaluating = true
	defer func() { j.evaluating = false }()
	var sum float64
	n := 0
	for b := range data.NewLoader(j.test, 4, data.NewSequentialSampler(j.test.Len())).Batches() {
		ids := make([]int, b.X.Len())
		for i, v := range b.X.Data() {
			ids[i] = int(v)
		}
		_, loss := j.m.Loss(ids, successors(b.X), b.Len(), evalGPT.BlockSize)
		sum += float64(loss.Item())
		n++
	}
	return []harness.Metric{{Name: "val_loss", Value: sum / float64(n)}}, nil
}

// watch records, before each block runs, which blocks hold values.
func (j *gptTask) watch() {
	for b, blk := range j.m.Blocks {
		nn.RegisterForwardPreHook(blk, func(nn.Module, *tensor.Tensor) {
			if !j.evaluating {
				return
			}
			held := 0
			for o, other := range j.m.Blocks {
				full := true
				for _, p := range nn.Parameters(other) {
					n := 1
					for _, d := range p.Shape() {
						n *= d
					}
					full = full && p.Len() == n
				}
				if full {
					held++
				} else if o == b {
					j.wrong = append(j.wrong, fmt.Sprintf("block %d runs without its values", b))
				}
			}
			j.maxBlocks = max(j.maxBlocks, held)
			if tensor.GradEnabled() {
				j.wrong = append(j.wrong, "autograd on in Evaluate")
			}
		})
	}
}

// shardEvalWorker is one rank of TestShardedEvaluation: it trains the
// GPT under --sharding full, evaluating every 2 steps, and prints what
// its evaluations saw and what its module holds after Train.
func shardEvalWorker() int {
	ctx := context.Background()
	r, err := harness.Start(ctx, harness.Config{Sharding: harness.ShardFull, Summary: os.Stdout, Save: os.Getenv("SHARDEVAL_SAVE")})
	if err != nil {
		return testproc.ExitCode(err)
	}
	defer r.Close()
	m := models.GPT(evalGPT)
	m.ResetParameters(tensor.NewRNG(1))
	fm, err := r.Wrap(ctx, m)
	if err != nil {
		return testproc.ExitCode(err)
	}
	j := &gptTask{run: r, m: m, model: fm, opt: optim.NewAdamW(fm.Parameters(), 1e-2), test: tokens(8, 2)}
	j.watch()
	train := tokens(64, 3)
	sampler := data.NewDistributedSampler(train.Len(), r.World(), r.Rank(), data.Seed(1))
	_, err = r.Train(ctx, j, harness.Loop{Data: data.NewLoader(train, 4, sampler, data.Prefetch(0)), Sampler: sampler,
		State: &checkpoint.TrainingState{Model: m, Optimizer: j.opt}, Steps: 4, EvalEvery: 2})
	if err != nil {
		return testproc.ExitCode(err)
	}
	held := 0
	for _, p := range nn.Parameters(m) {
		held += p.Len()
	}
	fmt.Printf("rank %d evals=%d max_blocks=%d held_after=%d wrong=%q\n", r.Rank(), j.evals, j.maxBlocks, held, j.wrong)
	return testproc.ExitCode(r.Report(event.Summary{}))
}

// TestShardedEvaluation: under Sharding full on 2 ranks, every rank runs
// every evaluation (Train's, every 2 steps and at the end), on the
// module itself, with autograd off, and no rank's module holds the whole
// model meanwhile: while a block runs, it alone of the blocks holds its
// values. Rank 0 alone prints the evaluations. After Train no module
// holds parameter values, and rank 0's model file, written unit by
// unit, loads into the GPT.
func TestShardedEvaluation(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	save := filepath.Join(t.TempDir(), "gpt.safetensors")
	ranks := testproc.Start(t, "shardeval", 2, testproc.Options{Env: []string{"GOTRAIN_TOKEN=harness", "GOTRAIN_RUN_ID=" + t.Name(),
		"GOTRAIN_NUM_THREADS=1", "SHARDEVAL_SAVE=" + save}})
	ranks.WaitOK()
	for i, p := range ranks.Procs() {
		text := p.Text()
		want := fmt.Sprintf("rank %d evals=2 max_blocks=1 held_after=0 wrong=[]\n", i)
		if !strings.Contains(text, want) {
			t.Errorf("rank %d: want %q; output:\n%s", i, want, text)
		}
		if evalLines := strings.Count(text, "val_loss="); evalLines != 2 && i == 0 || evalLines != 0 && i != 0 {
			t.Errorf("rank %d printed %d evaluations; output:\n%s", i, evalLines, text)
		}
	}
	m := models.GPT(evalGPT)
	if err := checkpoint.Load(save, m); err != nil {
		t.Fatal(err)
	}
}
