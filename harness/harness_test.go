package harness_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

var workers = testproc.Workers{"rank": rankWorker}

func TestMain(m *testing.M) {
	testproc.Dispatch(workers)
	os.Exit(m.Run())
}

// alone clears the variables that would make a test a rank of some
// outer job.
func alone(t *testing.T) {
	t.Helper()
	for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK", event.EnvFD, event.EnvSummary, event.EnvObserve} {
		t.Setenv(k, "")
	}
}

// job is a small classification Task on points of two classes, with
// what a Loop needs; it records the epochs it was told had ended.
type job struct {
	run      *harness.Run
	module   nn.Module
	model    harness.Model
	opt      optim.Optimizer
	test     *data.TensorDataset
	loop     harness.Loop
	ended    []int
	accuracy float64
	evals    int
}

// newJob builds the job on r: 512 training points (see the example's
// points) in batches of batch per rank, 16 steps an epoch for one rank of
// batch 32.
func newJob(t *testing.T, r *harness.Run, batch int) *job {
	t.Helper()
	j, err := buildJob(r, batch)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func buildJob(r *harness.Run, batch int) (*job, error) {
	nn.SetSeed(1)
	module := nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))
	m, err := r.Wrap(context.Background(), module)
	if err != nil {
		return nil, err
	}
	train := points(512, 2)
	sampler := data.NewDistributedSampler(train.Len(), r.World(), r.Rank(), data.Seed(1))
	opt := optim.NewSGD(m.Parameters(), 0.1, optim.Momentum(0.9))
	j := &job{run: r, module: module, model: m, opt: opt, test: points(256, 3)}
	j.loop = harness.Loop{Data: data.NewLoader(train, batch, sampler, data.Prefetch(0)), Sampler: sampler,
		State: &checkpoint.TrainingState{Model: module, Optimizer: opt}}
	return j, nil
}

func (j *job) Step(_ context.Context, s harness.Step, b data.Batch) (float64, error) {
	j.opt.ZeroGrad()
	var loss *tensor.Tensor
	j.run.Autocast(func() { loss = nn.CrossEntropy(j.model.Forward(b.X), b.Y) })
	s.Forwarded()
	if err := loss.Backward(); err != nil {
		return 0, err
	}
	s.Backwarded()
	j.opt.Step()
	return float64(loss.Item()), nil
}

func (j *job) Evaluate(context.Context) ([]harness.Metric, error) {
	j.evals++
	correct := 0
	tensor.NoGrad(func() {
		for b := range data.NewLoader(j.test, 64, data.NewSequentialSampler(j.test.Len())).Batches() {
			for i, p := range tensor.ArgMax(j.module.Forward(b.X), 1) {
				if p == b.Y[i] {
					correct++
				}
			}
		}
	})
	j.accuracy = float64(correct) / float64(j.test.Len())
	return []harness.Metric{{Name: "test_acc", Value: j.accuracy}, {Name: "lr", Value: j.opt.LR(), Format: "%.3g"}}, nil
}

func (j *job) EndEpoch(epoch int) { j.ended = append(j.ended, epoch) }

// start starts a run alone with cfg, its lines in out.
func start(t *testing.T, cfg harness.Config, out *bytes.Buffer) *harness.Run {
	t.Helper()
	alone(t)
	cfg.Out = out
	r, err := harness.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// train runs j with loop's counts set by set.
func train(t *testing.T, j *job, set func(*harness.Loop)) harness.Stats {
	t.Helper()
	l := j.loop
	set(&l)
	stats, err := j.run.Train(context.Background(), j, l)
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

func TestTrainEpochs(t *testing.T) {
	var out bytes.Buffer
	r := start(t, harness.Config{Profile: true}, &out)
	j := newJob(t, r, 32)
	stats := train(t, j, func(l *harness.Loop) { l.Epochs = 2 })
	if stats.World != 1 || stats.Rank != 0 || stats.Epochs != 2 || stats.Steps != 32 {
		t.Fatalf("stats %+v: want world 1, rank 0, 2 epochs of 16 steps", stats)
	}
	if j.loop.State.Epoch != 2 || j.loop.State.Step != 32 {
		t.Fatalf("state at epoch %d step %d; want 2 and 32", j.loop.State.Epoch, j.loop.State.Step)
	}
	if !slices.Equal(j.ended, []int{0, 1}) || j.evals != 2 {
		t.Fatalf("ended epochs %v, %d evaluations; want [0 1] and 2", j.ended, j.evals)
	}
	if j.accuracy < 0.95 || !(stats.TrainLoss > 0 && stats.TrainLoss < 0.5) {
		t.Fatalf("accuracy %v, training loss %v: the model did not learn", j.accuracy, stats.TrainLoss)
	}
	if !(stats.Throughput > 0) || !(stats.PeakRSSMiB > 0) || stats.Profile.Forward <= 0 || stats.Profile.ExposedAllReduce != 0 {
		t.Fatalf("stats %+v: want throughput, peak RSS and a profile without allreduce", stats)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "epoch 1: train_loss=") || !strings.HasPrefix(lines[1], "epoch 2: train_loss=") ||
		!strings.Contains(lines[1], " test_acc=") || !strings.HasPrefix(lines[2], "profile per step: data_ms=") {
		t.Fatalf("output:\n%s\nwant a line per epoch, then the profile", out.String())
	}
	if want := fmt.Sprintf(" test_acc=%.4f lr=0.1", j.accuracy); !strings.HasSuffix(lines[1], want) {
		t.Fatalf("%q does not end with %q: the metrics in their formats", lines[1], want)
	}
}

// With Steps and EvalEvery the run evaluates every EvalEvery steps and
// at the last, across an epoch's end.
func TestTrainStepsEvalEvery(t *testing.T) {
	var out bytes.Buffer
	r := start(t, harness.Config{}, &out)
	j := newJob(t, r, 32)
	stats := train(t, j, func(l *harness.Loop) { l.Steps, l.EvalEvery = 20, 8 })
	if stats.Steps != 20 || j.loop.State.Step != 20 || j.loop.State.Epoch != 1 {
		t.Fatalf("%d steps, state at epoch %d step %d; want 20 steps ending in epoch 1", stats.Steps, j.loop.State.Epoch, j.loop.State.Step)
	}
	if !slices.Equal(j.ended, []int{0}) || j.evals != 3 {
		t.Fatalf("ended epochs %v, %d evaluations; want [0] and 3", j.ended, j.evals)
	}
	var got []string
	for l := range strings.Lines(out.String()) {
		got = append(got, strings.SplitN(l, ":", 2)[0])
	}
	if !slices.Equal(got, []string{"step 8", "step 16", "step 20"}) {
		t.Fatalf("output:\n%s\nwant a line at steps 8, 16 and 20", out.String())
	}
}

// With Epochs and EvalEvery the run evaluates every EvalEvery steps and
// at its last, whatever the epochs' lengths.
func TestTrainEpochsEvalEvery(t *testing.T) {
	var out bytes.Buffer
	r := start(t, harness.Config{}, &out)
	j := newJob(t, r, 32)
	train(t, j, func(l *harness.Loop) { l.Epochs, l.EvalEvery = 2, 10 })
	var got []string
	for l := range strings.Lines(out.String()) {
		got = append(got, strings.SplitN(l, ":", 2)[0])
	}
	if !slices.Equal(got, []string{"step 10", "step 20", "step 30", "step 32"}) || !slices.Equal(j.ended, []int{0, 1}) {
		t.Fatalf("output:\n%s\nended epochs %v; want a line at steps 10, 20, 30 and 32, and both epochs ended", out.String(), j.ended)
	}
}

// MaxSteps stops the run within an epoch: the epoch is not over, and a
// resumed run finishes it.
func TestTrainMaxStepsStopsWithinAnEpoch(t *testing.T) {
	var out bytes.Buffer
	r := start(t, harness.Config{}, &out)
	j := newJob(t, r, 32)
	stats := train(t, j, func(l *harness.Loop) { l.Epochs, l.MaxSteps = 2, 5 })
	if stats.Steps != 5 || stats.Epochs != 1 || j.loop.State.Epoch != 0 || len(j.ended) != 0 || j.evals != 1 {
		t.Fatalf("stats %+v, state epoch %d, ended %v, %d evaluations: want 5 steps, epoch 0 not over, one evaluation",
			stats, j.loop.State.Epoch, j.ended, j.evals)
	}
}

// A run stopped and resumed ends with exactly the files of a run that
// never stopped: weights, momentum, counters and the sampler's place.
func TestResumeEqualsUninterrupted(t *testing.T) {
	dir := t.TempDir()
	straight, resumed := filepath.Join(dir, "straight.safetensors"), filepath.Join(dir, "resumed.safetensors")
	run := func(cfg harness.Config, max int) (harness.Stats, string) {
		var out bytes.Buffer
		r := start(t, cfg, &out)
		j := newJob(t, r, 32)
		stats := train(t, j, func(l *harness.Loop) { l.Epochs, l.MaxSteps = 2, max })
		r.Close()
		return stats, out.String()
	}
	run(harness.Config{Save: straight}, 0)
	run(harness.Config{Save: resumed, Resume: true, SaveEvery: 3}, 7)
	run(harness.Config{Save: resumed, Resume: true}, 13)
	stats, out := run(harness.Config{Save: resumed, Resume: true}, 0)
	if stats.Steps != 32-20 || !strings.Contains(out, "msg=resumed") || !strings.Contains(out, "step=20") {
		t.Fatalf("the last run took %d steps; want 12 after resuming at step 20; output:\n%s", stats.Steps, out)
	}
	for _, p := range [][2]string{{resumed, straight}, {checkpoint.TrainingPath(resumed), checkpoint.TrainingPath(straight)}} {
		a, errA := os.ReadFile(p[0])
		b, errB := os.ReadFile(p[1])
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s differs from %s (%v, %v)", p[0], p[1], errA, errB)
		}
	}
}

// The program's Extra is saved with the harness's own state and comes
// back on resume.
func TestResumeKeepsExtra(t *testing.T) {
	save := filepath.Join(t.TempDir(), "m.safetensors")
	type best struct{ Accuracy float64 }
	var out bytes.Buffer
	r := start(t, harness.Config{Save: save}, &out)
	j := newJob(t, r, 32)
	j.loop.State.Extra = &best{0.75}
	train(t, j, func(l *harness.Loop) { l.MaxSteps = 3 })
	r.Close()

	r = start(t, harness.Config{Save: save, Resume: true}, &out)
	j = newJob(t, r, 32)
	got := &best{}
	j.loop.State.Extra = got
	world, err := r.Resume(context.Background(), &j.loop)
	if err != nil {
		t.Fatal(err)
	}
	if world != 1 || got.Accuracy != 0.75 || j.loop.State.Step != 3 {
		t.Fatalf("resumed world %d, extra %+v, step %d; want 1, 0.75, 3", world, got, j.loop.State.Step)
	}
}

func TestStartRefusesBadConfig(t *testing.T) {
	alone(t)
	for _, tc := range []struct {
		cfg  harness.Config
		want string
	}{
		{harness.Config{Rank: -1}, "Rank -1"},
		{harness.Config{Rank: 2, WorldSize: 2}, "Rank 2 of WorldSize 2"},
		{harness.Config{SaveEvery: -1, Save: "m"}, "SaveEvery -1"},
		{harness.Config{SaveEvery: 5}, "SaveEvery 5 needs Save"},
		{harness.Config{Resume: true}, "Resume needs Save"},
		{harness.Config{MetricsEvery: -2}, "MetricsEvery -2"},
		{harness.Config{LogEvery: -1}, "LogEvery -1ns"},
		{harness.Config{Precision: "fp16"}, `Precision "fp16": want fp32, bf16 or bf16-emulated`},
	} {
		r, err := harness.Start(context.Background(), tc.cfg)
		if err == nil {
			r.Close()
		}
		if err == nil || !strings.HasPrefix(err.Error(), "harness: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start(%+v) = %v; want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// A malformed rank variable is an error naming it, never a lone run.
func TestStartRefusesMalformedEnv(t *testing.T) {
	for _, kv := range [][2]string{{"WORLD_SIZE", "abc"}, {"RANK", "x"}, {"LOCAL_WORLD_SIZE", "-1"}} {
		alone(t)
		t.Setenv(kv[0], kv[1])
		_, err := harness.Start(context.Background(), harness.Config{})
		if want := fmt.Sprintf("environment variable %s=%q", kv[0], kv[1]); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: %v; want an error containing %s", kv[0], kv[1], err, want)
		}
	}
}

// The zero Config trains alone in float32, and the zero Step marks
// nothing.
func TestZeroValues(t *testing.T) {
	var out bytes.Buffer
	r := start(t, harness.Config{}, &out)
	if r.World() != 1 || r.Rank() != 0 || r.Group() != nil || r.Precision() != harness.FP32 {
		t.Fatalf("zero Config: world %d rank %d group %v precision %q", r.World(), r.Rank(), r.Group(), r.Precision())
	}
	var s harness.Step
	s.Forwarded()
	s.Backwarded()
	ran := false
	r.Autocast(func() { ran = tensor.AutocastPrecision() == tensor.FP32 })
	if !ran {
		t.Fatal("Autocast did not run f in float32")
	}
}

func TestReportPrintsSummary(t *testing.T) {
	var out, sum bytes.Buffer
	r := start(t, harness.Config{Summary: &sum}, &out)
	s := event.Summary{Text: "sample:\nfunc main()\n"}
	s.Add("model", "%s", "mlp")
	s.Add("test_acc", "%.4f", 0.5)
	if err := r.Report(s); err != nil {
		t.Fatal(err)
	}
	if got, want := sum.String(), "sample:\nfunc main()\nmodel=mlp test_acc=0.5000\n"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
}

// Under a launcher that prints the summary itself, rank 0 sends it as
// its last event instead of printing it.
func TestReportSendsSummaryEvent(t *testing.T) {
	alone(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// The reporter closes the descriptor it is given: give it a copy.
	fd, err := syscall.Dup(int(pw.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Setenv(event.EnvFD, fmt.Sprint(fd))
	t.Setenv(event.EnvSummary, "1")
	var out, sum bytes.Buffer
	cfg := harness.Config{Out: &out, Summary: &sum}
	r, err := harness.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var s event.Summary
	s.Add("world", "%d", 1)
	if err := r.Report(s); err != nil {
		t.Fatal(err)
	}
	r.Close() // closes the pipe: the reader sees its end
	var got []event.Summary
	for sc := bufio.NewScanner(pr); sc.Scan(); {
		if event.KindOf(sc.Bytes()) != event.KindSummary {
			continue
		}
		var ev struct{ Data event.Summary }
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("summary event %q: %v", sc.Text(), err)
		}
		got = append(got, ev.Data)
	}
	if len(got) != 1 || got[0].Line() != "world=1" || sum.Len() != 0 {
		t.Fatalf("summary events %+v, printed %q; want one event world=1 and nothing printed", got, sum.String())
	}
}

// The metrics file has a row per MetricsEvery steps, and the trace the
// steps' phases and the checkpoints.
func TestMetricsAndTrace(t *testing.T) {
	dir := t.TempDir()
	cfg := harness.Config{Metrics: filepath.Join(dir, "m.jsonl"), Trace: filepath.Join(dir, "t.json"), MetricsEvery: 2,
		Save: filepath.Join(dir, "m.safetensors"), SaveEvery: 4}
	var out bytes.Buffer
	r := start(t, cfg, &out)
	j := newJob(t, r, 32)
	train(t, j, func(l *harness.Loop) { l.MaxSteps = 10 })
	b, err := os.ReadFile(cfg.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	var rows []event.Row
	for l := range strings.Lines(string(b)) {
		var row event.Row
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("row %q: %v", l, err)
		}
		rows = append(rows, row)
	}
	if len(rows) != 5 || rows[4].Step != 10 || rows[0].Steps != 2 || rows[0].Samples != 64 || math.Abs(rows[0].LR-0.1) > 1e-9 {
		t.Fatalf("rows %+v: want 5 rows of 2 steps of 32 samples at lr 0.1", rows)
	}
	b, err = os.ReadFile(cfg.Trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct{ TraceEvents []event.TraceEvent }
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			count[e.Name]++
		}
	}
	// Saves at steps 4 and 8, and at the end.
	if count["forward"] != 10 || count["backward"] != 10 || count["checkpoint"] != 3 || count["evaluate"] != 1 {
		t.Fatalf("spans %v", count)
	}
}

// rankWorker is one rank of TestTwoRanks: it trains the job with DDP,
// has rank 0 report, and prints a checksum of its weights.
func rankWorker() int {
	r, err := harness.Start(context.Background(), harness.Config{Summary: os.Stdout})
	if err != nil {
		return testproc.ExitCode(err)
	}
	defer r.Close()
	j, err := buildJob(r, 16)
	if err != nil {
		return testproc.ExitCode(err)
	}
	stats, err := r.Train(context.Background(), j, j.loop)
	if err != nil {
		return testproc.ExitCode(err)
	}
	var sum float64
	for _, p := range nn.Parameters(j.module) {
		for _, v := range p.Data() {
			sum += float64(v)
		}
	}
	fmt.Printf("rank %d weights %.9g\n", r.Rank(), sum)
	var s event.Summary
	s.Add("world", "%d", stats.World)
	s.Add("steps", "%d", stats.Steps)
	return testproc.ExitCode(r.Report(s))
}

// Two ranks train one model: DDP keeps their weights equal, each takes
// its half of every epoch, and only rank 0 evaluates and reports.
func TestTwoRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	ranks := testproc.Start(t, "rank", 2, testproc.Options{Env: []string{"GOTRAIN_TOKEN=harness", "GOTRAIN_RUN_ID=" + t.Name(), "GOTRAIN_NUM_THREADS=1"}})
	ranks.WaitOK()
	var weights []string
	for i, p := range ranks.Procs() {
		text := p.Text()
		for l := range strings.Lines(text) {
			if rest, ok := strings.CutPrefix(l, fmt.Sprintf("rank %d weights ", i)); ok {
				weights = append(weights, rest)
			}
		}
		hasSummary := strings.Contains(text, "world=2 steps=16\n")
		hasEval := strings.Contains(text, "epoch 1: train_loss=")
		if hasSummary != (i == 0) || hasEval != (i == 0) {
			t.Errorf("rank %d: summary %v, evaluation %v; want both on rank 0 only:\n%s", i, hasSummary, hasEval, text)
		}
	}
	if len(weights) != 2 || weights[0] != weights[1] {
		t.Fatalf("weights %q: want the same on both ranks", weights)
	}
}
