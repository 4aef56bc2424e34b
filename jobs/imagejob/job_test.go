package imagejob

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/data/images"
)

// writeTree writes classes × n PNGs of size×size under a new folder:
// class c is bright in channel c, so that a few steps learn it.
func writeTree(t *testing.T, classes, n, size int) string {
	t.Helper()
	root := t.TempDir()
	for c := range classes {
		dir := filepath.Join(root, "class"+strconv.Itoa(c))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			img := image.NewNRGBA(image.Rect(0, 0, size, size))
			for y := range size {
				for x := range size {
					v := [3]uint8{uint8(20 + 7*x), uint8(20 + 5*y), uint8(30 + i)}
					v[c%3] = 230
					img.Set(x, y, color.NRGBA{v[0], v[1], v[2], 255})
				}
			}
			var buf bytes.Buffer
			if err := png.Encode(&buf, img); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)+".png"), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
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
	dir := writeTree(t, 3, 8, 8)
	res, out := runLocal(t, Config{Dir: dir, ImageSize: 8, BatchSize: 4, Epochs: 2, Workers: 2, ValFraction: new(0.25)})
	// 24 images: 6 for validation, 18 to train on in ⌈18/4⌉ = 5 steps an
	// epoch.
	if res.Model != "resnet18" || res.World != 1 || res.Epochs != 2 || res.Steps != 10 {
		t.Fatalf("result %+v: want resnet18, world 1, 2 epochs of 5 steps", res)
	}
	if !(res.TrainLoss > 0) || math.IsInf(res.TrainLoss, 0) || !(res.ValAccuracy >= 0 && res.ValAccuracy <= 1) {
		t.Fatalf("result %+v: want a finite loss and an accuracy", res)
	}
	if !strings.Contains(out, "classes=3 train=18 validation=6 cached=true workers=2") {
		t.Fatalf("output lacks the data's description:\n%s", out)
	}
	want := regexp.MustCompile(`^model=resnet18 world=1 epochs=2 samples_per_s=\d+ train_loss=\d+\.\d{4} val_accuracy=[01]\.\d{4} peak_rss_mib=\d+$`)
	if s := res.Summary(); !want.MatchString(s) {
		t.Fatalf("summary %q does not match %v", s, want)
	}
}

// TestRunValidationFolder: --val's folder is read (uncached here) and
// must have the training classes.
func TestRunValidationFolder(t *testing.T) {
	dir, val := writeTree(t, 2, 4, 8), writeTree(t, 2, 3, 12)
	res, _ := runLocal(t, Config{Dir: dir, ValDir: val, ImageSize: 8, BatchSize: 4, MaxSteps: 1, CacheMiB: new(0)})
	if res.Steps != 1 || math.IsNaN(res.ValAccuracy) {
		t.Fatalf("result %+v: want a step and a validation accuracy", res)
	}
	if got := res.Summary(); !strings.Contains(got, " val_accuracy=0.") && !strings.Contains(got, " val_accuracy=1.") {
		t.Fatalf("summary %q", got)
	}
	res, _ = runLocal(t, Config{Dir: dir, ImageSize: 8, BatchSize: 4, MaxSteps: 1, ValFraction: new(0.0)})
	if !strings.Contains(res.Summary(), " val_accuracy=none ") {
		t.Fatalf("no validation: summary %q; want val_accuracy=none", res.Summary())
	}
	other := writeTree(t, 3, 2, 8)
	cfg := Config{Dir: dir, ValDir: other, ImageSize: 8}
	cfg.Out = io.Discard
	t.Setenv("WORLD_SIZE", "")
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), `classes ["class0" "class1" "class2"] differ from `+dir+`'s ["class0" "class1"]`) {
		t.Fatalf("validation folder of other classes: %v", err)
	}
}

// TestRunStopsOnACorruptImage: without the cache a corrupt image is
// found in training, and the run ends with one line naming it.
func TestRunStopsOnACorruptImage(t *testing.T) {
	dir := writeTree(t, 2, 4, 8)
	bad := filepath.Join(dir, "class1", "2.png")
	b, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, b[:len(b)-20], 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: dir, ImageSize: 8, BatchSize: 8, CacheMiB: new(0), ValFraction: new(0.0)}
	cfg.Out = io.Discard
	cfg.Logger = slog.New(slog.DiscardHandler)
	t.Setenv("WORLD_SIZE", "")
	_, err = Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), bad+": decoding: ") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v; want one line naming %s", err, bad)
	}
	// With the cache, at once, before training.
	cfg.CacheMiB = nil
	_, err = Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "imagejob: images: "+bad+": decoding: ") {
		t.Fatalf("cached: error %v; want one line naming %s", err, bad)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Setenv("WORLD_SIZE", "")
	dir := writeTree(t, 2, 2, 8)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Dir: want the folder of training images"},
		{Config{Dir: dir, Model: "resnet9"}, `Model "resnet9": want resnet18, resnet34 or resnet50`},
		{Config{Dir: dir, Stem: "big"}, `Stem "big": want cifar or imagenet`},
		{Config{Dir: dir, BatchSize: -1}, "BatchSize -1"},
		{Config{Dir: dir, LR: math.NaN()}, "LR NaN"},
		{Config{Dir: dir, ValFraction: new(1.0)}, "ValFraction 1: want a number in [0, 1)"},
		{Config{Dir: dir, ValDir: dir, ValFraction: new(0.5)}, "ValFraction 0.5: a validation folder"},
		{Config{Dir: dir, CacheMiB: new(-1)}, "CacheMiB -1"},
		{Config{Dir: filepath.Join(dir, "none")}, "images: " + filepath.Join(dir, "none") + ": no such directory"},
		{Config{Dir: dir, ValFraction: new(0.1)}, "too few images (4) to split off a fraction of 0.1 for validation"},
	} {
		cfg := tc.cfg
		cfg.Out = io.Discard
		cfg.Logger = slog.New(slog.DiscardHandler)
		_, err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v): %v; want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// TestResumedEpochAugmentsAsUninterrupted: a sampler restored into the
// middle of an epoch hands the Loader the rest of that epoch with the
// augmentation an uninterrupted run gives it, on any number of decoding
// goroutines.
func TestResumedEpochAugmentsAsUninterrupted(t *testing.T) {
	dir := writeTree(t, 2, 6, 10)
	c := Config{Dir: dir, ImageSize: 8}.withDefaults()
	trainTs, _ := c.transforms()
	newSampler := func() (epochSampler, *images.Folder) {
		f, err := images.NewFolder(dir, images.Transforms(trainTs...), images.Seed(4))
		if err != nil {
			t.Fatal(err)
		}
		return epochSampler{data.NewDistributedSampler(f.Len(), 1, 0, data.Seed(4)), f}, f
	}
	const batch = 4
	s, f := newSampler()
	var want [][]float32
	for epoch := range 3 {
		s.SetEpoch(epoch)
		for b := range data.NewLoader(f, batch, s, data.Workers(3)).Batches() {
			if epoch == 2 {
				want = append(want, slices.Clone(b.X.Data()))
			}
		}
	}
	r, rf := newSampler()
	if err := r.Restore(data.SamplerState{Epoch: 2, Seen: batch, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	// The reference: each example as the Folder gives it for epoch 2.
	ref, _ := newSampler()
	ref.folder.SetEpoch(2)
	x := make([]float32, 3*8*8)
	var got [][]float32
	for b := range data.NewLoader(rf, batch, r, data.Workers(1), data.Prefetch(0)).Batches() {
		got = append(got, slices.Clone(b.X.Data()))
		for k, i := range b.Indices {
			ref.folder.Example(i, x)
			if !slices.Equal(x, b.X.Data()[k*len(x):(k+1)*len(x)]) {
				t.Fatalf("resumed epoch: example %d is not augmented as for epoch 2", i)
			}
		}
	}
	if len(got) != len(want)-1 {
		t.Fatalf("resumed epoch: %d batches, want %d", len(got), len(want)-1)
	}
	for k := range got {
		if !slices.Equal(got[k], want[k+1]) {
			t.Fatalf("resumed epoch: batch %d differs from the uninterrupted run's", k+1)
		}
	}
}

// TestResumeEqualsUninterrupted: 7 steps, then the rest resumed from the
// checkpoint in the middle of the second epoch (on one decoding
// goroutine, without the cache), end with exactly the weights of the
// run in one go (on two, with the cache): the model, the momentum, the
// schedule, the sampler's place and the augmentation all come back.
func TestResumeEqualsUninterrupted(t *testing.T) {
	dir := writeTree(t, 3, 8, 8)
	cfg := Config{Dir: dir, ImageSize: 8, BatchSize: 4, Epochs: 2, ValFraction: new(0.25), Seed: 3}
	out := t.TempDir()
	straight := filepath.Join(out, "straight.safetensors")
	c := cfg
	c.Save, c.Workers = straight, 2
	runLocal(t, c)

	resumed := filepath.Join(out, "resumed.safetensors")
	c = cfg
	c.Save, c.Resume, c.MaxSteps, c.Workers, c.CacheMiB = resumed, true, 7, 1, new(0)
	runLocal(t, c)
	c.MaxSteps = 0
	res, log := runLocal(t, c)
	if !strings.Contains(log, "msg=resumed") || res.Steps != 3 {
		t.Fatalf("the second run took %d steps; want the 3 left after resuming at step 7:\n%s", res.Steps, log)
	}
	for _, p := range [][2]string{{resumed, straight}, {checkpoint.TrainingPath(resumed), checkpoint.TrainingPath(straight)}} {
		a, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p[1])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs from the uninterrupted run's %s", p[0], p[1])
		}
	}
}

func TestSplit(t *testing.T) {
	train, val := split(50, 0.2, 7)
	if len(val) != 10 || len(train) != 40 || !slices.IsSorted(val) || !slices.IsSorted(train) {
		t.Fatalf("split(50, 0.2): %d training and %d validation indices (sorted: %v %v)", len(train), len(val), slices.IsSorted(train), slices.IsSorted(val))
	}
	all := slices.Sorted(slices.Values(slices.Concat(train, val)))
	for i, v := range all {
		if v != i {
			t.Fatalf("split(50, 0.2): indices %v are not 0..49 once each", all)
		}
	}
	t2, v2 := split(50, 0.2, 7)
	_, v3 := split(50, 0.2, 8)
	if !slices.Equal(t2, train) || !slices.Equal(v2, val) || slices.Equal(v3, val) {
		t.Fatal("split is not a function of the seed")
	}
}

// TestFlagsTakeConfigDefaults: the flags left out give the Config's
// defaults, DIR is the one argument, and 0 given where zero is a setting
// of its own means it.
func TestFlagsTakeConfigDefaults(t *testing.T) {
	dir := t.TempDir()
	parse := func(args ...string) (Config, error) {
		var c Config
		f := pflag.NewFlagSet("train images", pflag.ContinueOnError)
		f.SetOutput(io.Discard)
		c.RegisterFlags(f)
		if err := f.Parse(args); err != nil {
			return c, err
		}
		if err := c.SetArgs(f.Args()); err != nil {
			return c, err
		}
		return c, c.CheckFlags(f)
	}
	c, err := parse(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, want := c.withDefaults(), Config{Dir: dir}.withDefaults()
	if got.Model != want.Model || got.Stem != "cifar" || got.ImageSize != 32 || got.BatchSize != 128 || got.LR != 0.1 ||
		got.Epochs != 1 || *got.CacheMiB != 512 || *got.ValFraction != 0.1 || got.Workers != 0 || got.Dir != dir {
		t.Fatalf("no flags: %+v; want the Config's defaults %+v", got, want)
	}
	if d := (Config{Dir: dir, ImageSize: 224}).withDefaults(); d.Stem != "imagenet" {
		t.Fatalf("--image-size 224: stem %s, want imagenet", d.Stem)
	}
	c, err = parse(dir, "--cache-mib", "0", "--val-fraction", "0")
	if err != nil || *c.CacheMiB != 0 || *c.ValFraction != 0 {
		t.Fatalf("--cache-mib 0 --val-fraction 0: %+v, %v; want both 0", c, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing DIR"},
		{[]string{dir, dir}, "unexpected argument"},
		{[]string{filepath.Join(dir, "x")}, "DIR " + filepath.Join(dir, "x") + ": does not exist"},
		{[]string{dir, "--val", filepath.Join(dir, "v")}, "--val " + filepath.Join(dir, "v") + ": does not exist"},
		{[]string{dir, "--stem", "tiny"}, "--stem tiny: must be cifar or imagenet"},
		{[]string{dir, "--workers", "0"}, "--workers 0: must be at least 1"},
		{[]string{dir, "--val-fraction", "1.5"}, "--val-fraction 1.5: must be a number in [0, 1)"},
		{[]string{dir, "--image-size", "0"}, "--image-size 0: must be at least 1"},
	} {
		if _, err := parse(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// TestDecodeWorkersDefault: the default leaves a CPU of this rank's
// share to the step, and never goes below one goroutine.
func TestDecodeWorkersDefault(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	for _, tc := range []struct {
		workers int
		ranks   string
		want    int
	}{
		{3, "", 3},
		{0, "", max(1, procs-1)},
		{0, "1", max(1, procs-1)},
		{0, "2", max(1, procs/2-1)},
		{0, strconv.Itoa(4 * procs), 1},
		{0, "many", max(1, procs-1)},
	} {
		t.Setenv("LOCAL_WORLD_SIZE", tc.ranks)
		if got := (Config{Workers: tc.workers}).decodeWorkers(); got != tc.want {
			t.Errorf("Workers %d, LOCAL_WORLD_SIZE=%q, GOMAXPROCS %d: %d decoders, want %d", tc.workers, tc.ranks, procs, got, tc.want)
		}
	}
}

func TestMemoryEstimate(t *testing.T) {
	small := Config{Dir: "d", BatchSize: 16}.MemoryEstimate()
	big := Config{Dir: "d", BatchSize: 512}.MemoryEstimate()
	if !(big.Bytes > small.Bytes) || big.Flag != "batch-size" || big.Value != 512 {
		t.Fatalf("batch 16: %+v; batch 512: %+v; want more memory, named by --batch-size", small, big)
	}
	if m := (Config{Dir: "d", ImageSize: 128, Stem: "cifar"}).MemoryEstimate(); m.Flag != "image-size" || m.Value != 128 {
		t.Fatalf("--image-size 128: %+v; want it named", m)
	}
	if off, on := (Config{Dir: "d", CacheMiB: new(0)}).MemoryEstimate(), (Config{Dir: "d"}).MemoryEstimate(); on.Bytes-off.Bytes != 512<<20 {
		t.Fatalf("the cache adds %d bytes; want its bound, 512 MiB", on.Bytes-off.Bytes)
	}
}
