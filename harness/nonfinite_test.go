package harness_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
)

func init() { workers["nanrank"] = nanRankWorker }

// nanJob is job with losses and gradient norms made non-finite at given
// steps (the gradients stay finite: what is tested is the decision), and
// a record of the steps whose update it applied.
type nanJob struct {
	*job
	nanAt   map[int]bool    // steps (counting from 1) whose loss it reports as NaN
	normAt  map[int]float64 // steps whose gradient norm it gives Update as this
	ask     bool            // it asks Step.Update
	step    int
	updated []int
}

func (j *nanJob) Step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
	j.step++
	j.opt.ZeroGrad()
	loss := nn.CrossEntropy(j.model.Forward(b.X), b.Y)
	s.Forwarded()
	if err := loss.Backward(); err != nil {
		return 0, err
	}
	s.Backwarded()
	l := float64(loss.Item())
	if j.nanAt[j.step] {
		l = math.NaN()
	}
	update := true
	if j.ask {
		var err error
		if update, err = s.Update(ctx, l, j.normAt[j.step]); err != nil {
			return 0, err
		}
	}
	if update {
		j.opt.Step()
		j.updated = append(j.updated, j.step)
	}
	return l, nil
}

// steps are the numbers from 1 to n but those in skip.
func steps(n int, skip ...int) []int {
	var s []int
	for i := 1; i <= n; i++ {
		if !slices.Contains(skip, i) {
			s = append(s, i)
		}
	}
	return s
}

// Under stop (the default) the first non-finite loss or gradient norm
// ends Train with an error naming it, the step, the epoch and the rank;
// asked before the optimizer, that step's update is not applied.
func TestOnNaNStop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nanAt   map[int]bool
		normAt  map[int]float64
		ask     bool
		want    string
		updated []int
	}{
		{"loss asked", map[int]bool{3: true}, nil, true, "loss is NaN at step 3 (epoch 1) on rank 0", steps(2)},
		{"loss returned", map[int]bool{3: true}, nil, false, "loss is NaN at step 3 (epoch 1) on rank 0", steps(3)},
		{"gradient norm", nil, map[int]float64{2: math.Inf(1)}, true, "gradient norm is +Inf at step 2 (epoch 1) on rank 0", steps(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			r := start(t, harness.Config{}, &out)
			j := &nanJob{job: newJob(t, r, 32), nanAt: tc.nanAt, normAt: tc.normAt, ask: tc.ask}
			_, err := r.Train(context.Background(), j, j.loop)
			var nf *harness.NonFiniteError
			if !errors.As(err, &nf) || err.Error() != tc.want {
				t.Fatalf("Train: %v; want a *NonFiniteError %q", err, tc.want)
			}
			if !slices.Equal(j.updated, tc.updated) {
				t.Errorf("updates at steps %v, want %v", j.updated, tc.updated)
			}
		})
	}
}

// Under warn the run goes on: the first non-finite loss is logged, once,
// the epoch's mean loss is NaN, and the summary counts the steps.
func TestOnNaNWarn(t *testing.T) {
	var out, log, sum bytes.Buffer
	r := start(t, harness.Config{OnNaN: harness.OnNaNWarn, Summary: &sum,
		Logger: slog.New(slog.NewTextHandler(&log, nil))}, &out)
	j := &nanJob{job: newJob(t, r, 32), nanAt: map[int]bool{2: true, 5: true}, ask: true}
	stats, err := r.Train(context.Background(), j, j.loop)
	if err != nil {
		t.Fatalf("Train: %v", err)
	}
	if stats.NaNSteps != 2 || stats.SkippedSteps != 0 || !math.IsNaN(stats.TrainLoss) || !slices.Equal(j.updated, steps(16)) {
		t.Fatalf("stats %+v, updates %v; want 2 NaN steps, none skipped, a NaN mean and every update", stats, j.updated)
	}
	if n := strings.Count(log.String(), "\n"); n != 1 || !strings.Contains(log.String(), `msg="loss is NaN at step 2 (epoch 1) on rank 0; training goes on`) {
		t.Errorf("log:\n%s\nwant one line for step 2", log.String())
	}
	if !strings.HasPrefix(out.String(), "epoch 1: train_loss=NaN test_acc=") {
		t.Errorf("output %q: want the epoch's loss as NaN", out.String())
	}
	if err := r.Report(event.Summary{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(sum.String()); got != "nan_steps=2" {
		t.Errorf("summary %q, want nan_steps=2", got)
	}
}

// Under skip the non-finite steps' updates are dropped and the run goes
// on: the epoch's loss is the mean of the steps that trained (NaN if none
// did), the metrics rows show the dropped steps' loss as null, and the
// summary counts them.
func TestOnNaNSkip(t *testing.T) {
	t.Run("some", func(t *testing.T) {
		var out, sum bytes.Buffer
		file := filepath.Join(t.TempDir(), "m.jsonl")
		r := start(t, harness.Config{OnNaN: harness.OnNaNSkip, Summary: &sum, Metrics: file,
			Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}, &out)
		j := &nanJob{job: newJob(t, r, 32), nanAt: map[int]bool{2: true, 5: true},
			normAt: map[int]float64{7: math.NaN()}, ask: true}
		stats, err := r.Train(context.Background(), j, j.loop)
		if err != nil {
			t.Fatalf("Train: %v", err)
		}
		if stats.NaNSteps != 3 || stats.SkippedSteps != 3 || !(stats.TrainLoss > 0 && stats.TrainLoss < 1) || !slices.Equal(j.updated, steps(16, 2, 5, 7)) {
			t.Fatalf("stats %+v, updates %v; want 3 steps skipped, the others' mean loss", stats, j.updated)
		}
		rows, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(strings.TrimSpace(string(rows)), "\n") {
			if null := strings.Contains(line, `"loss":null`); null != (i == 1 || i == 4) {
				t.Errorf("row of step %d: %s", i+1, line)
			}
		}
		if err := r.Report(event.Summary{}); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(sum.String()); got != "nan_steps=3 skipped_steps=3" {
			t.Errorf("summary %q", got)
		}
	})
	t.Run("all", func(t *testing.T) {
		var out bytes.Buffer
		r := start(t, harness.Config{OnNaN: harness.OnNaNSkip, Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}, &out)
		all := map[int]bool{}
		for i := range 17 {
			all[i] = true
		}
		j := &nanJob{job: newJob(t, r, 32), nanAt: all, ask: true}
		stats, err := r.Train(context.Background(), j, j.loop)
		if err != nil {
			t.Fatalf("Train: %v", err)
		}
		if stats.SkippedSteps != 16 || !math.IsNaN(stats.TrainLoss) || len(j.updated) != 0 {
			t.Fatalf("stats %+v, updates %v; want all 16 skipped and no mean", stats, j.updated)
		}
	})
}

// Under skip a Task that never asks Step.Update is refused at its first
// step: its update could not be dropped.
func TestOnNaNSkipNeedsUpdate(t *testing.T) {
	var out bytes.Buffer
	r := start(t, harness.Config{OnNaN: harness.OnNaNSkip}, &out)
	j := &nanJob{job: newJob(t, r, 32)}
	_, err := r.Train(context.Background(), j, j.loop)
	if err == nil || !strings.Contains(err.Error(), "OnNaN skip needs the Task's Step to call Step.Update") || j.step != 1 {
		t.Fatalf("Train: %v after %d steps; want the refusal at the first", err, j.step)
	}
}

func TestOnNaNRefusesUnknown(t *testing.T) {
	alone(t)
	_, err := harness.Start(context.Background(), harness.Config{OnNaN: "ignore"})
	if err == nil || err.Error() != `harness: OnNaN "ignore": want stop, skip or warn` {
		t.Fatalf("Start: %v", err)
	}
}

// The zero Step always updates.
func TestZeroStepUpdates(t *testing.T) {
	ok, err := harness.Step{}.Update(context.Background(), math.NaN(), math.Inf(1))
	if !ok || err != nil {
		t.Fatalf("Update = %v, %v", ok, err)
	}
}

// nanRankWorker is one rank of TestOnNaNSkipTwoRanks: rank 1 reports a
// NaN loss at step 3, rank 0 never does; it prints the steps it updated
// and a checksum of its weights.
func nanRankWorker() int {
	r, err := harness.Start(context.Background(), harness.Config{OnNaN: harness.OnNaNSkip, Summary: os.Stdout})
	if err != nil {
		return testproc.ExitCode(err)
	}
	defer r.Close()
	base, err := buildJob(r, 16)
	if err != nil {
		return testproc.ExitCode(err)
	}
	j := &nanJob{job: base, ask: true, nanAt: map[int]bool{3: r.Rank() == 1}}
	if _, err := r.Train(context.Background(), j, j.loop); err != nil {
		return testproc.ExitCode(err)
	}
	var sum float64
	for _, p := range nn.Parameters(j.module) {
		for _, v := range p.Data() {
			sum += float64(v)
		}
	}
	fmt.Printf("rank %d updated %v weights %.9g\n", r.Rank(), j.updated, sum)
	return testproc.ExitCode(r.Report(event.Summary{}))
}

// Under skip a loss that is NaN on one rank drops the step's update on
// every rank, so that the DDP replicas stay equal.
func TestOnNaNSkipTwoRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	ranks := testproc.Start(t, "nanrank", 2, testproc.Options{Env: []string{"GOTRAIN_TOKEN=harness", "GOTRAIN_RUN_ID=" + t.Name(), "GOTRAIN_NUM_THREADS=1"}})
	ranks.WaitOK()
	want := fmt.Sprint(steps(16, 3))
	var weights []string
	for i, p := range ranks.Procs() {
		text := p.Text()
		prefix := fmt.Sprintf("rank %d updated %s weights ", i, want)
		found := false
		for l := range strings.Lines(text) {
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				weights, found = append(weights, strings.TrimSpace(rest)), true
			}
		}
		if !found {
			t.Fatalf("rank %d: no line %q...:\n%s", i, prefix, text)
		}
		if i == 0 && !strings.Contains(text, "nan_steps=1 skipped_steps=1\n") {
			t.Errorf("rank 0: no summary counting the skipped step:\n%s", text)
		}
	}
	if weights[0] != weights[1] {
		t.Fatalf("weights %q: want the same on both ranks", weights)
	}
}
