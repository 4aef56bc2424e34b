package mnistjob

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/harness"
)

// syncBNSteps is how long the SyncBatchNorm training test trains.
const syncBNSteps = 20

// maxRelDiff returns the largest |a − b| of a tensor relative to its
// largest |a|, over the tensors of a, and that tensor's name.
func maxRelDiff(t *testing.T, a, b map[string][]float32) (float64, string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d tensors vs %d", len(a), len(b))
	}
	worst, at := 0.0, ""
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
		if d := maxDiff / math.Max(maxAbs, 1e-30); d > worst {
			worst, at = d, name
		}
	}
	return worst, at
}

// testAcc returns the test accuracy rank 0 printed after epoch 1.
func testAcc(t *testing.T, out string) float64 {
	t.Helper()
	m := regexp.MustCompile(`epoch 1: train_loss=\S+ test_acc=([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no test accuracy of epoch 1 in the output:\n%s", out)
	}
	acc, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

// With --sync-bn, the BatchNorm CNN on 2 ranks × batch 32 trains the
// model of 1 process × batch 64, running statistics included, up to
// rounding, and so reaches its accuracy; without it each rank normalises
// its own 32 samples and the runs part.
func TestSyncBNTwoRanksMatchOneProcessWithTwiceTheBatch(t *testing.T) {
	dir := t.TempDir()
	// SGD, not the CNN's Adadelta: Adadelta's steps do not shrink with the
	// gradient, so for the parameters whose gradient is rounding noise
	// (a convolution's bias before BatchNorm) it would compare noise.
	// The global batch stays 64: the learning rate must not scale.
	cfg := Config{Model: "cnn-bn", Optimizer: "sgd", LRScaling: "none", MaxSteps: syncBNSteps}
	one := filepath.Join(dir, "one.safetensors")
	c := cfg
	c.BatchSize, c.Save = 64, one
	res, _ := runLocal(t, c)

	synced := filepath.Join(dir, "synced.safetensors")
	c = cfg
	c.BatchSize, c.SyncBN, c.Save = 32, true, synced
	out := runRanks(t, c)
	if !strings.Contains(out, "BatchNorm over the global batch (SyncBatchNorm)") {
		t.Errorf("no rank logged SyncBatchNorm; output:\n%s", out)
	}
	d, name := maxRelDiff(t, readTensors(t, one), readTensors(t, synced))
	// float32 sums in another order through 20 steps: measured 4e-5 (of
	// a BatchNorm bias, whose values are small); without SyncBatchNorm
	// the runs differ by 0.3.
	if d > 1e-3 {
		t.Errorf("2 ranks with SyncBatchNorm differ from 1 process with their global batch: %s by %.2g of its largest value", name, d)
	}
	t.Logf("with SyncBatchNorm, largest difference %.2g of the tensor's largest value (%s)", d, name)
	// The accuracies of nearly equal weights: within 0.3 points.
	if acc := testAcc(t, out); math.Abs(acc-res.TestAccuracy) > 0.003 {
		t.Errorf("test accuracy %.4f on 2 ranks with SyncBatchNorm, %.4f in 1 process: want within 0.003", acc, res.TestAccuracy)
	}

	local := filepath.Join(dir, "local.safetensors")
	c = cfg
	c.BatchSize, c.Save = 32, local
	runRanks(t, c)
	if d, name := maxRelDiff(t, readTensors(t, one), readTensors(t, local)); d < 1e-2 {
		t.Errorf("2 ranks with BatchNorm over their own batches are as close to 1 process as with SyncBatchNorm (%s by %.2g): the test cannot tell them apart", name, d)
	}
}

// --sync-bn with a model without BatchNorm is refused in one line, by the
// flags and by Run.
func TestSyncBNNeedsBatchNorm(t *testing.T) {
	for _, model := range []string{"mlp", "cnn"} {
		var c Config
		f := pflag.NewFlagSet("train mnist", pflag.ContinueOnError)
		c.RegisterFlags(f)
		if err := f.Parse([]string{"--model", model, "--sync-bn"}); err != nil {
			t.Fatal(err)
		}
		err := c.CheckFlags(f)
		if err == nil || !strings.Contains(err.Error(), "--sync-bn") || !strings.Contains(err.Error(), "the "+model+" model has no BatchNorm layer (use --model cnn-bn)") || strings.Contains(err.Error(), "\n") {
			t.Errorf("--model %s --sync-bn: %v; want one line naming --sync-bn and --model cnn-bn", model, err)
		}
	}
	t.Setenv("WORLD_SIZE", "")
	_, err := Run(context.Background(), Config{SyncBN: true, MaxSteps: 1, Config: harness.Config{Out: io.Discard}})
	if want := `mnistjob: SyncBN: model "mlp" has no BatchNorm layer (want Model cnn-bn)`; err == nil || err.Error() != want {
		t.Errorf("Run with SyncBN and the default model: %v; want %q", err, want)
	}
}
