package ddp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

func smallModel(seed uint64) nn.Module {
	m := nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
	nn.ResetParameters(m, tensor.NewRNG(seed))
	return m
}

// fixedData is a deterministic regression-free classification set.
func fixedData(n int) ([]float32, []int) {
	rng := tensor.NewRNG(99)
	x := tensor.Randn(rng, n, 8).Data()
	y := make([]int, n)
	for i := range y {
		y[i] = i % 4
	}
	return x, y
}

func slice(x []float32, y []int, lo, hi int) (*tensor.Tensor, []int) {
	return tensor.New(append([]float32(nil), x[lo*8:hi*8]...), hi-lo, 8), y[lo:hi]
}

// runRanks runs f on n in-process ranks and returns their errors.
func runRanks(n int, f func(rank int, g Group) error) []error {
	gs := newLocalGroups(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r, gs[r])
			if errs[r] != nil {
				gs[r].h.breakAll(errs[r])
			}
		}()
	}
	wg.Wait()
	return errs
}

func paramsOf(m nn.Module) [][]float32 {
	var out [][]float32
	for _, p := range nn.Parameters(m) {
		out = append(out, append([]float32(nil), p.Data()...))
	}
	return out
}

func maxRelDiff(a, b [][]float32) float64 {
	worst := 0.0
	for i := range a {
		for j := range a[i] {
			d := math.Abs(float64(a[i][j] - b[i][j]))
			s := math.Max(math.Abs(float64(b[i][j])), 1e-3)
			worst = math.Max(worst, d/s)
		}
	}
	return worst
}

const (
	steps     = 20
	perRank   = 32
	worldSize = 2
)

// reference trains one process on batches of perRank*worldSize.
func reference(t *testing.T, accumulate int) [][]float32 {
	x, y := fixedData(steps * perRank * worldSize)
	m := smallModel(1)
	opt := optim.NewSGD(nn.Parameters(m), 0.1, optim.Momentum(0.9))
	batch := perRank * worldSize
	for s := 0; s < steps/accumulate; s++ {
		opt.ZeroGrad()
		bx, by := slice(x, y, s*batch*accumulate, (s+1)*batch*accumulate)
		loss := nn.CrossEntropy(m.Forward(bx), by)
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
		opt.Step()
	}
	return paramsOf(m)
}

// trainDDP trains worldSize replicas, each seeded differently (DDP must
// broadcast rank 0's weights), rank r taking its share of every batch.
func trainDDP(t *testing.T, accumulate int, opts ...Option) [][][]float32 {
	x, y := fixedData(steps * perRank * worldSize)
	results := make([][][]float32, worldSize)
	errs := runRanks(worldSize, func(rank int, g Group) error {
		m := smallModel(uint64(1 + rank*1000))
		dm, err := New(context.Background(), m, g, opts...)
		if err != nil {
			return err
		}
		defer dm.Close()
		opt := optim.NewSGD(dm.Parameters(), 0.1, optim.Momentum(0.9))
		batch := perRank * worldSize
		for s := 0; s < steps/accumulate; s++ {
			opt.ZeroGrad()
			for k := 0; k < accumulate; k++ {
				base := (s*accumulate + k) * batch
				bx, by := slice(x, y, base+rank*perRank, base+(rank+1)*perRank)
				step := func() error {
					loss := nn.CrossEntropy(dm.Forward(bx), by)
					// Scale so k accumulated micro-batches average like one big batch.
					return tensor.MulScalar(loss, 1/float32(accumulate)).Backward()
				}
				if k < accumulate-1 {
					err = dm.NoSync(step)
				} else {
					err = step()
				}
				if err != nil {
					return err
				}
			}
			opt.Step()
		}
		results[rank] = paramsOf(m)
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return results
}

func checkEquivalent(t *testing.T, want [][]float32, got [][][]float32) {
	t.Helper()
	if d := maxRelDiff(got[0], want); d > 1e-5 {
		t.Errorf("DDP parameters differ from single-process training: max relative difference %g", d)
	}
	for r := 1; r < len(got); r++ {
		for i := range got[r] {
			for j := range got[r][i] {
				if math.Float32bits(got[r][i][j]) != math.Float32bits(got[0][i][j]) {
					t.Fatalf("rank %d parameter %d[%d] = %v, rank 0 has %v: replicas diverged", r, i, j, got[r][i][j], got[0][i][j])
				}
			}
		}
	}
}

func TestDDPMatchesSingleProcess(t *testing.T) {
	want := reference(t, 1)
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"default", nil},
		{"bucket-view", []Option{GradientAsBucketView(true)}},
		{"tiny-buckets", []Option{BucketCapMB(256.0 / (1 << 20))}}, // several buckets, rebuilt after step 1
		{"tiny-buckets-view", []Option{BucketCapMB(100.0 / (1 << 20)), GradientAsBucketView(true)}},
		{"inline", []Option{OverlapComm(false)}},
		{"inline-tiny-buckets-view", []Option{OverlapComm(false), BucketCapMB(100.0 / (1 << 20)), GradientAsBucketView(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkEquivalent(t, want, trainDDP(t, 1, tc.opts...))
		})
	}
}

func TestNoSyncAccumulationEqualsLargerBatch(t *testing.T) {
	want := reference(t, 2)
	for _, view := range []bool{false, true} {
		checkEquivalent(t, want, trainDDP(t, 2, GradientAsBucketView(view)))
		checkEquivalent(t, want, trainDDP(t, 2, GradientAsBucketView(view), OverlapComm(false)))
	}
}

func TestCompressionHooksApproximateAverage(t *testing.T) {
	want := reference(t, 1)
	for name, h := range map[string]CommHook{"fp16": FP16CompressHook, "bf16": BF16CompressHook} {
		got := trainDDP(t, 1, WithCommHook(h))
		tol := 2e-2
		if d := maxRelDiffAbs(got[0], want); d > tol {
			t.Errorf("%s: parameters differ from full precision by %g (> %g)", name, d, tol)
		}
		checkEquivalentReplicas(t, got)
	}
}

func maxRelDiffAbs(a, b [][]float32) float64 {
	worst := 0.0
	for i := range a {
		for j := range a[i] {
			worst = math.Max(worst, math.Abs(float64(a[i][j]-b[i][j])))
		}
	}
	return worst
}

func checkEquivalentReplicas(t *testing.T, got [][][]float32) {
	t.Helper()
	for r := 1; r < len(got); r++ {
		if d := maxRelDiffAbs(got[r], got[0]); d != 0 {
			t.Fatalf("rank %d differs from rank 0 by %g", r, d)
		}
	}
}

func TestShapeMismatchNamesParameterAndShapes(t *testing.T) {
	errs := runRanks(2, func(rank int, g Group) error {
		hidden := 16
		if rank == 1 {
			hidden = 12
		}
		m := nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))
		_, err := New(context.Background(), m, g)
		return err
	})
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: mismatched models accepted", r)
		}
		msg := err.Error()
		for _, want := range []string{`"0.weight"`, "rank 0: [16 8]", "rank 1: [12 8]"} {
			if !strings.Contains(msg, want) {
				t.Errorf("rank %d error %q lacks %q", r, msg, want)
			}
		}
	}
}

func TestUnusedParameters(t *testing.T) {
	// Branch b is never used: without FindUnusedParameters Backward must
	// fail naming it; with it training proceeds with zero gradients.
	build := func() (nn.Module, *nn.LinearLayer) {
		used := nn.Sequential(nn.Linear(8, 4))
		unused := nn.Linear(8, 4)
		return nn.Sequential(used, unused), unused
	}
	x, y := fixedData(perRank * worldSize)
	for _, c := range []struct{ find, overlap bool }{{false, true}, {true, true}, {false, false}, {true, false}} {
		find := c.find
		errs := runRanks(2, func(rank int, g Group) error {
			m, _ := build()
			dm, err := New(context.Background(), m, g, FindUnusedParameters(find), OverlapComm(c.overlap))
			if err != nil {
				return err
			}
			defer dm.Close()
			first := nn.NamedModules(m)[1].Module
			bx, by := slice(x, y, rank*perRank, (rank+1)*perRank)
			loss := nn.CrossEntropy(first.Forward(bx), by)
			return loss.Backward()
		})
		for r, err := range errs {
			if find && err != nil {
				t.Errorf("FindUnusedParameters: rank %d: %v", r, err)
			}
			if !find && (err == nil || !strings.Contains(err.Error(), "1.weight")) {
				t.Errorf("without FindUnusedParameters: rank %d error %v, want one naming 1.weight", r, err)
			}
		}
	}
}

func TestCommunicationFailureSurfacesFromBackward(t *testing.T) {
	for _, overlap := range []bool{true, false} {
		t.Run(fmt.Sprintf("overlap=%v", overlap), func(t *testing.T) {
			testCommunicationFailure(t, OverlapComm(overlap), BucketCapMB(100.0/(1<<20)))
		})
	}
}

func testCommunicationFailure(t *testing.T, opts ...Option) {
	gs := newLocalGroups(2)
	boom := errors.New("peer 1 lost")
	m := smallModel(1)
	// Rank 1 joins New, then dies; rank 0's Backward must return the error.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := New(context.Background(), smallModel(2), gs[1], opts...); err != nil {
			t.Error(err)
		}
		gs[1].h.breakAll(boom)
	}()
	dm, err := New(context.Background(), m, gs[0], opts...)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer dm.Close()
	x, y := fixedData(perRank)
	bx, by := slice(x, y, 0, perRank)
	err = nn.CrossEntropy(dm.Forward(bx), by).Backward()
	if !errors.Is(err, boom) {
		t.Fatalf("Backward returned %v, want the communication error", err)
	}
}

// sharedGroup is a group that reports ranks sharing this host.
type sharedGroup struct {
	Group
	shared bool
	size   int
}

func (g sharedGroup) SharedMemory() bool { return g.shared }
func (g sharedGroup) Size() int          { return g.size }

func TestOverlapByDefault(t *testing.T) {
	prev := kernels.SetNumThreads(1)
	defer kernels.SetNumThreads(prev)
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		g    Group
		want bool
	}{
		{newLocalGroups(2)[0], true},                   // no shared memory: reductions wait on the network
		{sharedGroup{shared: false, size: cpus}, true}, // ranks on several hosts
		{sharedGroup{shared: true, size: cpus}, false}, // one rank per CPU: no spare CPU
		{sharedGroup{shared: true, size: 2 * cpus}, false},
	} {
		if got := overlapByDefault(tc.g); got != tc.want {
			t.Errorf("overlapByDefault(%+v) on %d CPUs = %v, want %v", tc.g, cpus, got, tc.want)
		}
	}
	if cpus > 1 {
		if !overlapByDefault(sharedGroup{shared: true, size: 1}) {
			t.Errorf("one rank on %d CPUs: want overlap", cpus)
		}
	}
}

func TestReducesInlineFollowsOverlapComm(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		errs := runRanks(2, func(rank int, g Group) error {
			dm, err := New(context.Background(), smallModel(1), g, OverlapComm(overlap))
			if err != nil {
				return err
			}
			defer dm.Close()
			if got := dm.ReducesInline(); got == overlap {
				return fmt.Errorf("OverlapComm(%v): ReducesInline() = %v", overlap, got)
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	}
}

// TestUnusedParameterAfterZeroGrad: with gradients as bucket views, a
// parameter one rank uses and another does not must be averaged with that
// rank's zeros, also after ZeroGrad, which defers its zeros: the bucket
// still holds the last pass's gradient there, which must not be sent.
func TestUnusedParameterAfterZeroGrad(t *testing.T) {
	x, y := fixedData(perRank * worldSize)
	build := func() (*nn.LinearLayer, *nn.LinearLayer, nn.Module) {
		used, unused := nn.Linear(8, 4), nn.Linear(8, 4)
		m := nn.Sequential(used, unused)
		nn.ResetParameters(m, tensor.NewRNG(3))
		return used, unused, m
	}
	both := func(used, unused *nn.LinearLayer, bx *tensor.Tensor, by []int) error {
		return nn.CrossEntropy(tensor.Add(used.Forward(bx), unused.Forward(bx)), by).Backward()
	}
	// Rank 0's own gradient of the second branch in the second pass: the
	// average over 2 ranks is half of it.
	ru, rn, _ := build()
	bx0, by0 := slice(x, y, 0, perRank)
	if err := both(ru, rn, bx0, by0); err != nil {
		t.Fatal(err)
	}
	want := rn.Weight.Grad().Data()
	for _, overlap := range []bool{true, false} {
		errs := runRanks(2, func(rank int, g Group) error {
			used, unused, m := build()
			dm, err := New(context.Background(), m, g, FindUnusedParameters(true), GradientAsBucketView(true), OverlapComm(overlap))
			if err != nil {
				return err
			}
			defer dm.Close()
			bx, by := slice(x, y, rank*perRank, (rank+1)*perRank)
			if err := both(used, unused, bx, by); err != nil {
				return err
			}
			for _, p := range nn.Parameters(m) {
				p.ZeroGrad()
			}
			if rank == 0 {
				err = both(used, unused, bx, by)
			} else {
				err = nn.CrossEntropy(used.Forward(bx), by).Backward()
			}
			if err != nil {
				return err
			}
			got := unused.Weight.Grad().Data()
			for i := range got {
				if d := got[i] - want[i]/2; d > 1e-6 || d < -1e-6 {
					return fmt.Errorf("second branch's averaged gradient[%d] = %v, want %v (rank 0's %v over 2 ranks)", i, got[i], want[i]/2, want[i])
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("overlap=%v rank %d: %v", overlap, r, err)
			}
		}
	}
}
