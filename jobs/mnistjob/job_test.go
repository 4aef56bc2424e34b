package mnistjob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
)

// workerCfgEnv holds the JSON Config a "rank" worker runs (the launcher
// provides RANK, WORLD_SIZE, ...).
const workerCfgEnv = "MNISTJOB_TEST_CONFIG"

// rankDirsEnv, when set, gives each rank a checkpoint directory of its own,
// as on machines without a shared file system: Save "d/m.safetensors"
// becomes "d/rank<RANK>/m.safetensors".
const rankDirsEnv = "MNISTJOB_TEST_RANK_DIRS"

var workers = testproc.Workers{
	"rank": func() int {
		var cfg Config
		if err := json.Unmarshal([]byte(os.Getenv(workerCfgEnv)), &cfg); err != nil {
			slog.Error("worker config", "err", err)
			return 2
		}
		if os.Getenv(rankDirsEnv) != "" {
			dir := filepath.Join(filepath.Dir(cfg.Save), "rank"+os.Getenv("RANK"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				slog.Error("worker checkpoint directory", "err", err)
				return 2
			}
			cfg.Save = filepath.Join(dir, filepath.Base(cfg.Save))
		}
		_, err := Run(context.Background(), cfg)
		if err != nil {
			slog.Error("worker", "err", err)
		}
		return testproc.ExitCode(err)
	},
}

func TestMain(m *testing.M) {
	testproc.Dispatch(workers)
	os.Exit(m.Run())
}

// runLocal runs cfg in this process as a single-process job.
func runLocal(t *testing.T, cfg Config) (Result, string) {
	t.Helper()
	t.Setenv("WORLD_SIZE", "") // not a rank of some outer job
	var out bytes.Buffer
	cfg.Out = &out
	cfg.Logger = slog.New(slog.NewTextHandler(&out, nil))
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run(%+v): %v; output:\n%s", cfg, err, out.String())
	}
	return res, out.String()
}

func TestRunSingleProcess(t *testing.T) {
	res, out := runLocal(t, Config{MaxSteps: 20, Config: harness.Config{Profile: true}})
	if res.Model != "mlp" || res.World != 1 || res.Epochs != 1 || res.Steps != 20 {
		t.Fatalf("result %+v: want mlp, world 1, epoch 1, 20 steps", res)
	}
	if res.TestAccuracy < 0.5 || res.TestAccuracy > 1 {
		t.Fatalf("test accuracy %v after 20 steps; want well above chance", res.TestAccuracy)
	}
	if res.SamplesPerSec <= 0 || res.PeakRSSMiB <= 0 {
		t.Fatalf("result %+v: want samples/s and peak RSS", res)
	}
	p := res.Profile
	if p.Forward <= 0 || p.Backward <= 0 || p.Optimizer <= 0 || p.ExposedAllReduce != 0 {
		t.Fatalf("profile %+v: want forward, backward and optimizer time and no allreduce wait in one process", p)
	}
	if !strings.Contains(out, "epoch 1: train_loss=") || !strings.Contains(out, "profile per step: data_ms=") {
		t.Fatalf("output lacks the epoch's accuracy or the profile:\n%s", out)
	}
	want := regexp.MustCompile(`^model=mlp world=1 epochs=1 steps=20 samples_per_s=\d+ test_acc=0\.\d{4} peak_rss_mib=\d+$`)
	if s := res.Summary(); !want.MatchString(s) {
		t.Fatalf("summary %q does not match %v", s, want)
	}
}

func TestRunOptimizers(t *testing.T) {
	for _, opt := range []string{"adam", "adamw", "adadelta"} {
		t.Run(opt, func(t *testing.T) {
			res, _ := runLocal(t, Config{Optimizer: opt, MaxSteps: 20})
			if res.Steps != 20 || res.TestAccuracy < 0.5 {
				t.Fatalf("%s: result %+v; want 20 steps and accuracy well above chance", opt, res)
			}
		})
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Setenv("WORLD_SIZE", "")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Model: "resnet"}, `Model "resnet": want mlp, cnn or cnn-bn`},
		{Config{Optimizer: "lbfgs"}, `Optimizer "lbfgs": want sgd, adadelta, adam or adamw`},
		{Config{CommHook: "gzip"}, `CommHook "gzip"`},
		{Config{LRScaling: "sqrt"}, `LRScaling "sqrt"`},
		{Config{Epochs: -1}, "Epochs -1"},
		{Config{BatchSize: -64}, "BatchSize -64"},
		{Config{Config: harness.Config{SaveEvery: -1}}, "SaveEvery -1"},
		{Config{Config: harness.Config{SaveEvery: 5}}, "SaveEvery 5 needs Save"},
		{Config{MaxSteps: -1}, "MaxSteps -1"},
		{Config{LR: -0.1}, "LR -0.1"},
		{Config{LR: math.NaN()}, "LR NaN"},
		{Config{LR: math.Inf(1)}, "LR +Inf"},
		{Config{Momentum: new(math.NaN())}, "Momentum NaN"},
		{Config{Momentum: new(-0.5)}, "Momentum -0.5"},
		{Config{Gamma: new(math.Inf(-1))}, "Gamma -Inf"},
		// The value named is the one passed, not the one scaled to the world.
		{Config{LR: -1, Optimizer: "sgd", LRScaling: "linear", Config: harness.Config{Rank: 0, WorldSize: 2}}, "LR -1:"},
		{Config{Config: harness.Config{Rank: 2, WorldSize: 2}}, "Rank 2 of WorldSize 2"},
		{Config{Config: harness.Config{Rank: -1}}, "Rank -1"},
		{Config{Config: harness.Config{Resume: true}}, "Resume needs Save"},
		{Config{Config: harness.Config{Precision: "fp16"}}, `Precision "fp16": want fp32, bf16 or bf16-emulated`},
	} {
		cfg := tc.cfg
		cfg.Out = io.Discard
		if cfg.MaxSteps == 0 {
			cfg.MaxSteps = 1
		}
		_, err := Run(context.Background(), cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "mnistjob: ") || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Run(%+v) = %v; want one line \"mnistjob: …%s…\"", tc.cfg, err, tc.want)
		}
	}
}

func TestScaledLR(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		world int
		want  float64
	}{
		{Config{Optimizer: "sgd", LR: 0.01}, 1, 0.01},
		{Config{Optimizer: "sgd", LR: 0.01}, 4, 0.04},
		{Config{Optimizer: "sgd", LR: 0.01, LRScaling: "none"}, 4, 0.01},
		{Config{Optimizer: "adadelta", LR: 1}, 2, 1},
		{Config{Optimizer: "adam", LR: 0.001, LRScaling: "linear"}, 2, 0.002},
	} {
		if got := scaledLR(tc.cfg, tc.world); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("scaledLR(%+v, world %d) = %v, want %v", tc.cfg, tc.world, got, tc.want)
		}
	}
}

// 20 steps, then 20 more resumed from the checkpoint, end with exactly the
// weights of 40 steps in one go: model, momentum and the sampler's
// position all come back.
func TestResumeEqualsUninterrupted(t *testing.T) {
	dir := t.TempDir()
	straight := filepath.Join(dir, "straight.safetensors")
	runLocal(t, Config{MaxSteps: 40, Config: harness.Config{Save: straight}})

	resumed := filepath.Join(dir, "resumed.safetensors")
	runLocal(t, Config{MaxSteps: 20, Config: harness.Config{Save: resumed, SaveEvery: 7, Resume: true}})
	res, out := runLocal(t, Config{MaxSteps: 20, Config: harness.Config{Save: resumed, Resume: true}})
	if !strings.Contains(out, "msg=resumed") || !strings.Contains(out, "step=20") {
		t.Fatalf("second run did not resume at step 20:\n%s", out)
	}
	if res.Steps != 20 {
		t.Fatalf("resumed run took %d steps; want 20", res.Steps)
	}
	equalFiles(t, resumed, straight)
	equalFiles(t, checkpoint.TrainingPath(resumed), checkpoint.TrainingPath(straight))
}

// A run stopped within an epoch and resumed steps its per-epoch schedule
// once for that epoch, as the uninterrupted run does: the rest of the
// epoch trains at the same learning rate, and the saved schedule agrees.
func TestResumeMidEpochStepsScheduleOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Optimizer: "adadelta", BatchSize: 1000} // StepLR γ=0.7 per epoch; 60 steps an epoch
	straight := filepath.Join(dir, "straight.safetensors")
	c := cfg
	c.Save = straight
	runLocal(t, c)

	resumed := filepath.Join(dir, "resumed.safetensors")
	c = cfg
	c.Save, c.Resume, c.MaxSteps = resumed, true, 25
	runLocal(t, c)
	c.MaxSteps = 0
	runLocal(t, c)
	equalFiles(t, resumed, straight)
	equalFiles(t, checkpoint.TrainingPath(resumed), checkpoint.TrainingPath(straight))
}

// With Resume, a model file whose training sidecar is missing is an error
// naming both files, and the model file is not overwritten by a fresh run.
func TestResumeWithoutSidecarFails(t *testing.T) {
	save := filepath.Join(t.TempDir(), "m.safetensors")
	runLocal(t, Config{MaxSteps: 3, Config: harness.Config{Save: save}})
	side := checkpoint.TrainingPath(save)
	if err := os.Remove(side); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(save)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("WORLD_SIZE", "")
	_, err = Run(context.Background(), Config{MaxSteps: 3, Config: harness.Config{Save: save, Resume: true, Out: io.Discard}})
	if err == nil || !strings.Contains(err.Error(), save) || !strings.Contains(err.Error(), side) {
		t.Fatalf("resuming without %s: %v; want an error naming it and %s", side, err, save)
	}
	if after, err := os.ReadFile(save); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("%s was changed (err %v)", save, err)
	}
}

// A flipped byte in the sidecar's tensor data is an error naming the file
// and the tensor.
func TestResumeFromFlippedByteFails(t *testing.T) {
	save := filepath.Join(t.TempDir(), "m.safetensors")
	runLocal(t, Config{MaxSteps: 3, Config: harness.Config{Save: save}})
	side := checkpoint.TrainingPath(save)
	b, err := os.ReadFile(side)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-5] ^= 0x01 // in the last tensor's data
	if err := os.WriteFile(side, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WORLD_SIZE", "")
	_, err = Run(context.Background(), Config{MaxSteps: 3, Config: harness.Config{Save: save, Resume: true, Out: io.Discard}})
	if !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), side) || !regexp.MustCompile(`tensor "[^"]+": checksum mismatch`).MatchString(err.Error()) {
		t.Fatalf("resuming from a flipped byte in %s: %v; want ErrCorrupt naming it and the tensor", side, err)
	}
}

func TestResumeFromCorruptCheckpointFails(t *testing.T) {
	save := filepath.Join(t.TempDir(), "m.safetensors")
	runLocal(t, Config{MaxSteps: 3, Config: harness.Config{Save: save}})
	side := checkpoint.TrainingPath(save)
	b, err := os.ReadFile(side)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(side, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WORLD_SIZE", "")
	_, err = Run(context.Background(), Config{MaxSteps: 3, Config: harness.Config{Save: save, Resume: true, Out: io.Discard}})
	if err == nil || !strings.Contains(err.Error(), side) {
		t.Fatalf("resuming from a truncated %s: %v; want an error naming it", side, err)
	}
}

// The job on 2 ranks × batch 32 trains the same model as on 1 process ×
// batch 64: DistributedSampler splits each global batch of 64 between the
// ranks and DDP averages their gradients, so only rounding differs.
func TestTwoRanksMatchOneProcessWithTwiceTheBatch(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.safetensors")
	runLocal(t, Config{MaxSteps: 20, BatchSize: 64, Config: harness.Config{Save: one}})

	two := filepath.Join(dir, "two.safetensors")
	// The global batch stays 64, so the learning rate must not scale.
	runRanks(t, Config{MaxSteps: 20, BatchSize: 32, LRScaling: "none", Config: harness.Config{Save: two}})

	a, b := readTensors(t, one), readTensors(t, two)
	if len(a) != len(b) {
		t.Fatalf("%d tensors vs %d", len(a), len(b))
	}
	worst := 0.0
	for name, x := range a {
		y := b[name]
		if len(x) != len(y) {
			t.Fatalf("%s: %d vs %d elements", name, len(x), len(y))
		}
		var maxDiff, maxAbs float64
		for i := range x {
			maxDiff = math.Max(maxDiff, math.Abs(float64(x[i])-float64(y[i])))
			maxAbs = math.Max(maxAbs, math.Abs(float64(x[i])))
		}
		worst = math.Max(worst, maxDiff/maxAbs)
		// float32 sums in another order, over 20 steps: measured 2e-7.
		if maxDiff > 1e-5*maxAbs {
			t.Errorf("%s: max |1 process − 2 ranks| = %g, %g of max |w| %g", name, maxDiff, maxDiff/maxAbs, maxAbs)
		}
	}
	t.Logf("largest difference: %.2g of the tensor's largest weight", worst)
}

// runRanks runs cfg as a job of 2 ranks, each a process of this test
// binary started by launch.Run, and returns their output; env is added to
// the workers' environment.
func runRanks(t *testing.T, cfg Config, env ...string) string {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := launch.Run(ctx, launch.Config{
		Program:      self,
		NProcPerNode: 2,
		Standalone:   true,
		Env:          append(append(testproc.Environ("rank"), workerCfgEnv+"="+string(js)), env...),
		Stdout:       &out,
		Stderr:       &out,
	})
	if err != nil || code != 0 {
		t.Fatalf("2-rank job %+v: exit %d, %v; output:\n%s", cfg, code, err, out.String())
	}
	return out.String()
}

// Resuming a 2-rank job whose ranks each have a checkpoint directory of
// their own (only rank 0's holds files, as on machines without a shared
// file system) ends with the weights of the uninterrupted run: rank 1
// receives rank 0's model, optimizer state, counters and sampler position.
func TestTwoRanksResumeWithoutSharedFiles(t *testing.T) {
	dir := t.TempDir()
	straight := filepath.Join(dir, "straight", "m.safetensors")
	runRanks(t, Config{MaxSteps: 40, Config: harness.Config{Save: straight}}, rankDirsEnv+"=1")

	resumed := filepath.Join(dir, "resumed", "m.safetensors")
	runRanks(t, Config{MaxSteps: 20, Config: harness.Config{Save: resumed, SaveEvery: 7, Resume: true}}, rankDirsEnv+"=1")
	out := runRanks(t, Config{MaxSteps: 20, Config: harness.Config{Save: resumed, Resume: true}}, rankDirsEnv+"=1")
	if n := len(regexp.MustCompile(`resumed.*step=20`).FindAllString(out, -1)); n != 2 {
		t.Fatalf("%d ranks logged a resume at step 20; want 2. Output:\n%s", n, out)
	}
	rank0 := func(p string) string { return filepath.Join(filepath.Dir(p), "rank0", filepath.Base(p)) }
	equalFiles(t, rank0(resumed), rank0(straight))
	equalFiles(t, checkpoint.TrainingPath(rank0(resumed)), checkpoint.TrainingPath(rank0(straight)))
	if names, err := os.ReadDir(filepath.Join(dir, "resumed", "rank1")); err != nil || len(names) != 0 {
		t.Fatalf("rank 1's checkpoint directory holds %v (err %v); want it empty", names, err)
	}
}

func equalFiles(t *testing.T, got, want string) {
	t.Helper()
	g, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Fatalf("%s differs from %s", got, want)
	}
}

// readTensors returns the float32 tensors of a safetensors file by name.
func readTensors(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	entries, _, err := checkpoint.ReadTensorsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]float32{}
	for _, e := range entries {
		m[e.Name] = e.Tensor.Data()
	}
	return m
}

// A malformed rank variable is an error naming it, not a lone run: the
// job must not read WORLD_SIZE=abc as one rank.
func TestRunRejectsMalformedEnv(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"WORLD_SIZE", "abc"}, {"RANK", "x"}, {"LOCAL_WORLD_SIZE", "y"}, {"WORLD_SIZE", "-2"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			t.Setenv("WORLD_SIZE", "")
			t.Setenv("RANK", "")
			t.Setenv("LOCAL_WORLD_SIZE", "")
			t.Setenv(tc.name, tc.value)
			_, err := Run(context.Background(), Config{MaxSteps: 1, Config: harness.Config{Out: io.Discard}})
			want := fmt.Sprintf("environment variable %s=%q", tc.name, tc.value)
			if err == nil || !strings.HasPrefix(err.Error(), "mnistjob: ") || !strings.Contains(err.Error(), want) {
				t.Fatalf("Run = %v; want an error containing %s", err, want)
			}
		})
	}
}

// A checkpoint of a 2-rank job resumed by one rank (an elastic job that
// lost a node) re-shards the epoch's rest and halves the learning rate
// that linear scaling doubled for two ranks.
func TestResumeInSmallerWorldRescalesLR(t *testing.T) {
	save := filepath.Join(t.TempDir(), "m.safetensors")
	runRanks(t, Config{MaxSteps: 10, Config: harness.Config{Save: save}})
	res, out := runLocal(t, Config{MaxSteps: 5, Config: harness.Config{Save: save, Resume: true}})
	if !regexp.MustCompile(`resuming in a world of another size.* was=2 world=1 lr=0\.01\b`).MatchString(out) {
		t.Fatalf("no rescaled learning rate logged on resume; output:\n%s", out)
	}
	if res.Steps != 5 || res.World != 1 {
		t.Fatalf("resumed run: %d steps in world %d; want 5 in 1", res.Steps, res.World)
	}
}
