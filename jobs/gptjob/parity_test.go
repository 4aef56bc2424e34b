package gptjob

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/data/text"
	"github.com/gotrain/gotrain/datasets/gotext"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/testfixture"
	"github.com/gotrain/gotrain/internal/testproc"
)

// parityFixture mirrors testdata/parity.json, written by
// testdata/gen_parity.py with PyTorch: 20 AdamW steps of the default GPT
// from testdata/parity_init.safetensors on the global batches whose
// window offsets it lists.
type parityFixture struct {
	Steps       int       `json:"steps"`
	GlobalBatch int       `json:"global_batch"`
	BlockSize   int       `json:"block_size"`
	LR          float64   `json:"lr"`
	MinLR       float64   `json:"min_lr"`
	Warmup      int       `json:"warmup"`
	Clip        float64   `json:"clip"`
	Offsets     [][]int   `json:"offsets"`
	Losses      []float64 `json:"losses"`
	LRs         []float64 `json:"lrs"`
}

var workers = testproc.Workers{"parity": parityWorker}

func TestMain(m *testing.M) {
	testproc.Dispatch(workers)
	os.Exit(m.Run())
}

// parityConfig is the job's default GPT and recipe with the fixture's
// schedule and batch (per rank), from the fixture's weights.
func parityConfig(f *parityFixture, world int) Config {
	return Config{BlockSize: f.BlockSize, BatchSize: f.GlobalBatch / world, MaxSteps: f.Steps, LR: f.LR, MinLR: new(f.MinLR),
		WarmupSteps: new(f.Warmup), GradClip: new(f.Clip), Init: "testdata/parity_init.safetensors",
		Config: harness.Config{Out: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
}

// parityBatch is rank's share of step's global batch: the training split
// of the shipped corpus at the fixture's offsets.
func parityBatch(j *job, f *parityFixture, step, rank, world int) data.Batch {
	tokens := text.ByteTokenizer{}.Encode(gotext.Corpus())
	T, per := f.BlockSize, f.GlobalBatch/world
	b := data.Batch{T: T}
	for _, o := range f.Offsets[step][rank*per : (rank+1)*per] {
		b.Inputs = append(b.Inputs, tokens[o:o+T]...)
		b.Targets = append(b.Targets, tokens[o+1:o+T+1]...)
		b.Indices = append(b.Indices, o)
	}
	return b
}

// paritySteps runs the fixture's steps on this rank and returns the loss
// of each, averaged over the ranks (the loss of the global batch).
func paritySteps(ctx context.Context, f *parityFixture, cfg Config, rank, world int) ([]float64, []float64, error) {
	j, err := newJob(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer j.close()
	var losses, lrs []float64
	for step := range f.Steps {
		loss, err := j.step(context.Background(), harness.Step{}, parityBatch(j, f, step, rank, world))
		if err != nil {
			return nil, nil, err
		}
		mean := []float64{loss}
		if pg := j.run.Group(); pg != nil {
			if err := pg.AllReduce(ctx, mean, distributed.Avg); err != nil {
				return nil, nil, err
			}
		}
		losses, lrs = append(losses, mean[0]), append(lrs, j.opt.LR())
	}
	return losses, lrs, nil
}

func checkParity(t *testing.T, f *parityFixture, losses, lrs []float64) {
	t.Helper()
	if len(losses) != f.Steps {
		t.Fatalf("%d losses for %d steps", len(losses), f.Steps)
	}
	worst := 0.0
	defer func() { t.Logf("largest relative loss difference from PyTorch over %d steps: %.2g", f.Steps, worst) }()
	for i, want := range f.Losses {
		rel := math.Abs(losses[i]-want) / want
		worst = math.Max(worst, rel)
		if rel > 1e-4 {
			t.Errorf("step %d: loss %.7f, PyTorch %.7f (relative difference %.2g > 1e-4)", i+1, losses[i], want, rel)
		}
		if math.Abs(lrs[i]-f.LRs[i]) > 1e-12 {
			t.Errorf("step %d: lr %.9g, PyTorch %.9g", i+1, lrs[i], f.LRs[i])
		}
	}
}

func TestParityWithPyTorchOneProcess(t *testing.T) {
	f := testfixture.Load[parityFixture](t, "parity.json")
	losses, lrs, err := paritySteps(context.Background(), f, parityConfig(f, 1), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkParity(t, f, losses, lrs)
}

// TestParityWithPyTorchTwoRanks runs the same steps on two DDP ranks in
// two processes, each with half of every global batch: the averaged
// gradients, the clipping by their norm and the AdamW steps must give
// PyTorch's one-process losses.
func TestParityWithPyTorchTwoRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	ranks := testproc.Start(t, "parity", 2, testproc.Options{Env: []string{"GOTRAIN_TOKEN=parity", "GOTRAIN_RUN_ID=" + t.Name()}})
	ranks.WaitOK()
	f := testfixture.Load[parityFixture](t, "parity.json")
	var losses, lrs []float64
	for _, l := range ranks.Procs()[0].Lines() {
		var step int
		var loss, lr float64
		if _, err := fmt.Sscanf(l.Text, "step %d loss %g lr %g", &step, &loss, &lr); err == nil {
			losses, lrs = append(losses, loss), append(lrs, lr)
		}
	}
	checkParity(t, f, losses, lrs)
}

// parityWorker is one rank of TestParityWithPyTorchTwoRanks: it prints
// the global batch's loss and the learning rate after each step.
func parityWorker() int {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	f, err := testfixture.Read[parityFixture]("parity.json")
	if err != nil {
		return testproc.ExitCode(err)
	}
	losses, lrs, err := paritySteps(context.Background(), f, parityConfig(f, 2), rank, 2)
	if err != nil {
		return testproc.ExitCode(err)
	}
	var b strings.Builder
	for i := range losses {
		fmt.Fprintf(&b, "step %d loss %.9g lr %.12g\n", i+1, losses[i], lrs[i])
	}
	fmt.Print(b.String())
	return 0
}
