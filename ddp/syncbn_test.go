package ddp

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// statsGroup is one rank of in-process groups for SyncBatchNorm's float64
// reductions (localGroup reduces float32 only). It counts the reductions
// asked of it and fails them all with fail, if set.
type statsGroup struct {
	*localGroup
	calls int
	fail  error
}

func newStatsGroups(n int) []*statsGroup {
	out := make([]*statsGroup, n)
	for r, g := range newLocalGroups(n) {
		out[r] = &statsGroup{localGroup: g}
	}
	return out
}

func (g *statsGroup) AllReduce(ctx context.Context, buf any, op distributed.ReduceOp) error {
	g.calls++
	if g.fail != nil {
		return g.fail
	}
	if _, ok := buf.([]float32); ok { // DDP's buckets, in TestNewRefusesSyncBatchNormOnOverlappingGroup
		return g.localGroup.AllReduce(ctx, buf, op)
	}
	b, ok := buf.([]float64)
	if !ok || op != distributed.Sum {
		return fmt.Errorf("statsGroup: AllReduce of %T with op %v", buf, op)
	}
	all, err := g.h.exchange(g.rank, append([]float64(nil), b...))
	if err != nil {
		return err
	}
	clear(b)
	for _, v := range all { // rank order: identical on every rank
		for i, x := range v.([]float64) {
			b[i] += x
		}
	}
	return nil
}

// bnChannels is the channel count of the SyncBatchNorm tests' layers.
const bnChannels = 3

// newTestBN returns a BatchNorm layer of dims 1 or 2 with weight, bias and
// running statistics away from their defaults, so that each takes part.
func newTestBN(dims int) *nn.BatchNormLayer {
	var b *nn.BatchNormLayer
	if dims == 1 {
		b = nn.BatchNorm1d(bnChannels, nn.Momentum(0.3))
	} else {
		b = nn.BatchNorm2d(bnChannels, nn.Momentum(0.3))
	}
	copy(b.Weight.Data(), []float32{1.5, -0.5, 2})
	copy(b.Bias.Data(), []float32{0.1, 0.2, -0.3})
	copy(b.RunningMean.Data(), []float32{0.5, -1, 2})
	copy(b.RunningVar.Data(), []float32{2, 0.5, 1})
	return b
}

// bnBatch is a batch of n samples of shape [n, C, tail...] whose channels
// have means away from 0 (sums of squares would lose them in float32).
func bnBatch(rng *tensor.RNG, n int, tail []int) []float32 {
	shape := append([]int{n, bnChannels}, tail...)
	x := tensor.Randn(rng, shape...).Data()
	per := 1
	for _, d := range tail {
		per *= d
	}
	for i := range x {
		ch := i / per % bnChannels
		x[i] = x[i]*float32(1+ch) + float32(2*ch-1)
	}
	return x
}

// bnStep is what one forward and backward pass gives on one rank (or on
// the whole batch, for the reference).
type bnStep struct {
	out, dx, dw, db []float32
}

// bnResult is a run's steps and its final running statistics.
type bnResult struct {
	steps                []bnStep
	runMean, runVar, nbt []float32
}

func clone(t *tensor.Tensor) []float32 {
	if t == nil {
		return nil
	}
	return slices.Clone(t.Data())
}

// bnPass runs fwd on x (made a leaf requiring grad) and back-propagates
// Σ out·g / total.
func bnPass(t *testing.T, fwd func(*tensor.Tensor) *tensor.Tensor, b *nn.BatchNormLayer, x, g []float32, shape []int, total int) bnStep {
	t.Helper()
	xt := tensor.New(x, shape...)
	xt.SetRequiresGrad(true)
	b.Weight.SetGrad(nil)
	b.Bias.SetGrad(nil)
	out := fwd(xt)
	loss := tensor.MulScalar(tensor.Sum(tensor.Mul(out, tensor.New(g, shape...)), false), 1/float32(total))
	if err := loss.Backward(); err != nil {
		t.Errorf("Backward: %v", err)
	}
	dx := make([]float32, len(x))
	if xt.Grad() != nil {
		copy(dx, xt.Grad().Data())
	}
	return bnStep{out: clone(out), dx: dx, dw: clone(b.Weight.Grad()), db: clone(b.Bias.Grad())}
}

// closeTo reports the first element of got farther than float32 noise
// from want (relative to want's largest magnitude), or "".
func closeTo(got, want []float32, scale float32) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want))
	}
	var top float64
	for _, w := range want {
		top = max(top, math.Abs(float64(w)))
	}
	tol := 2e-6 * max(top, 1) * float64(scale)
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol) {
			return fmt.Sprintf("element %d = %v, want %v (tolerance %.2g)", i, got[i], want[i], tol)
		}
	}
	return ""
}

func TestSyncBatchNormMatchesConcatenatedBatch(t *testing.T) {
	cases := []struct {
		name  string
		dims  int
		tail  []int // input shape after [N, C]
		sizes []int // each rank's batch
	}{
		{"2d/2 ranks", 2, []int{3, 2}, []int{4, 4}},
		{"2d/3 ranks unequal, one empty", 2, []int{2, 3}, []int{5, 0, 2}},
		{"1d/2 ranks unequal, one sample", 1, nil, []int{1, 6}},
		{"1d sequence/3 ranks unequal", 1, []int{4}, []int{2, 3, 1}},
	}
	const steps = 2
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			world, total := len(tc.sizes), 0
			for _, n := range tc.sizes {
				total += n
			}
			per := bnChannels
			for _, d := range tc.tail {
				per *= d
			}
			shapeOf := func(n int) []int { return append([]int{n, bnChannels}, tc.tail...) }
			rng := tensor.NewRNG(7)
			var xs, gs [][]float32
			for s := 0; s < steps; s++ {
				xs = append(xs, bnBatch(rng, total, tc.tail))
				gs = append(gs, tensor.Randn(rng, shapeOf(total)...).Data())
			}

			// The reference: BatchNorm over the whole batch in one process.
			ref := newTestBN(tc.dims)
			var want bnResult
			for s := 0; s < steps; s++ {
				want.steps = append(want.steps, bnPass(t, ref.Forward, ref, xs[s], gs[s], shapeOf(total), total))
			}
			want.runMean, want.runVar, want.nbt = clone(ref.RunningMean), clone(ref.RunningVar), clone(ref.NumBatchesTracked)

			// world ranks, each with its slice, in DDP over one group and
			// synchronising statistics over another.
			dgs, sgs := newLocalGroups(world), newStatsGroups(world)
			got := make([]bnResult, world)
			errs := make([]error, world)
			var wg sync.WaitGroup
			for r := 0; r < world; r++ {
				wg.Go(func() {
					errs[r] = func() error {
						ctx := context.Background()
						b := newTestBN(tc.dims)
						model := nn.Sequential(b)
						if _, err := ConvertSyncBatchNorm(ctx, model, sgs[r]); err != nil {
							return err
						}
						dm, err := New(ctx, model, dgs[r])
						if err != nil {
							return err
						}
						defer dm.Close()
						lo := 0
						for _, n := range tc.sizes[:r] {
							lo += n
						}
						hi := lo + tc.sizes[r]
						for s := 0; s < steps; s++ {
							got[r].steps = append(got[r].steps, bnPass(t, dm.Forward, b, xs[s][lo*per:hi*per], gs[s][lo*per:hi*per], shapeOf(tc.sizes[r]), total))
						}
						got[r].runMean, got[r].runVar, got[r].nbt = clone(b.RunningMean), clone(b.RunningVar), clone(b.NumBatchesTracked)
						return nil
					}()
					if errs[r] != nil {
						dgs[r].h.breakAll(errs[r])
						sgs[r].h.breakAll(errs[r])
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}

			for r := 0; r < world; r++ {
				lo := 0
				for _, n := range tc.sizes[:r] {
					lo += n
				}
				hi := lo + tc.sizes[r]
				for s := 0; s < steps; s++ {
					g, w := got[r].steps[s], want.steps[s]
					// DDP averages the local weight and bias gradients: times
					// the world, they are the sums over all slices.
					dw, db := slices.Clone(g.dw), slices.Clone(g.db)
					for i := range dw {
						dw[i] *= float32(world)
						db[i] *= float32(world)
					}
					for _, c := range []struct {
						what      string
						got, want []float32
					}{
						{"output", g.out, w.out[lo*per : hi*per]},
						{"input gradient", g.dx, w.dx[lo*per : hi*per]},
						{"weight gradient × world", dw, w.dw},
						{"bias gradient × world", db, w.db},
					} {
						if msg := closeTo(c.got, c.want, 1); msg != "" {
							t.Errorf("rank %d, step %d: %s: %s", r, s, c.what, msg)
						}
					}
				}
				for _, c := range []struct {
					what      string
					got, want []float32
				}{
					{"running_mean", got[r].runMean, want.runMean},
					{"running_var", got[r].runVar, want.runVar},
					{"num_batches_tracked", got[r].nbt, want.nbt},
				} {
					if msg := closeTo(c.got, c.want, 1); msg != "" {
						t.Errorf("rank %d: %s: %s", r, c.what, msg)
					}
				}
				// Every rank reduced the same sums in the same order.
				if !slices.Equal(got[r].runVar, got[0].runVar) || !slices.Equal(got[r].runMean, got[0].runMean) {
					t.Errorf("rank %d running statistics %v %v differ from rank 0's %v %v", r, got[r].runMean, got[r].runVar, got[0].runMean, got[0].runVar)
				}
			}
		})
	}
}

func TestConvertSyncBatchNormKeepsStateDict(t *testing.T) {
	ctx := context.Background()
	build := func() *nn.SequentialLayer {
		nn.SetSeed(3)
		return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(8, 4), nn.BatchNorm1d(4))
	}
	m := build()
	// A training pass moves the running statistics off their defaults.
	m.Forward(tensor.Randn(tensor.NewRNG(1), 5, 1, 4, 4))
	before := nn.StateDict(m)
	values := make([][]float32, len(before))
	for i, e := range before {
		values[i] = clone(e.Tensor)
	}

	s, err := ConvertSyncBatchNorm(ctx, m, newStatsGroups(1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Layers(), []string{"1", "5"}; !slices.Equal(got, want) {
		t.Errorf("Layers() = %q, want %q", got, want)
	}
	after := nn.StateDict(m)
	if len(after) != len(before) {
		t.Fatalf("state dict has %d entries after converting, %d before", len(after), len(before))
	}
	for i, e := range after {
		if e.Name != before[i].Name || e.Dtype != before[i].Dtype || !slices.Equal(e.Tensor.Data(), values[i]) {
			t.Errorf("entry %d: %s %v = %v after converting, %s %v = %v before", i, e.Name, e.Dtype, e.Tensor.Data(), before[i].Name, before[i].Dtype, values[i])
		}
	}
	if got := fmt.Sprint(m); !strings.Contains(got, "SyncBatchNorm(2, eps=1e-05, momentum=0.1") || !strings.Contains(got, "SyncBatchNorm(4,") || strings.Contains(got, "BatchNorm2d") {
		t.Errorf("converted model prints as\n%s\nwant SyncBatchNorm for both BatchNorm layers, as PyTorch prints it", got)
	}

	// A checkpoint of the plain model loads into a converted one.
	fresh := build()
	if _, err := ConvertSyncBatchNorm(ctx, fresh, newStatsGroups(1)[0]); err != nil {
		t.Fatal(err)
	}
	if err := nn.LoadStateDict(fresh, nn.StateDictMap(m), true); err != nil {
		t.Fatalf("loading the state dict into a converted model: %v", err)
	}
	for i, e := range nn.StateDict(fresh) {
		if !slices.Equal(e.Tensor.Data(), values[i]) {
			t.Errorf("%s after loading = %v, want %v", e.Name, e.Tensor.Data(), values[i])
		}
	}

	_, err = ConvertSyncBatchNorm(ctx, m, newStatsGroups(1)[0])
	if err == nil || !strings.Contains(err.Error(), "1 (SyncBatchNorm(2,") || !strings.Contains(err.Error(), "synchronised already") || strings.Contains(err.Error(), "\n") {
		t.Errorf("converting twice: %v, want one line naming layer 1 as synchronised already", err)
	}
	if _, err := ConvertSyncBatchNorm(ctx, nn.Sequential(nn.Linear(2, 2)), newStatsGroups(1)[0]); !errors.Is(err, ErrNoBatchNorm) {
		t.Errorf("converting a model without BatchNorm: %v, want ErrNoBatchNorm", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m); strings.Contains(got, "SyncBatchNorm") {
		t.Errorf("after Close the model prints as\n%s\nwant plain BatchNorm", got)
	}
}

// The BatchNorm CNN of `gotrain train mnist --model cnn-bn` has PyTorch's
// state dict before and after conversion, and prints as PyTorch prints it
// (testdata/syncbn_gen.py wrote the fixture).
func TestConvertSyncBatchNormMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/syncbn_mnistnet_bn.json")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		StateDict     [][3]any `json:"state_dict"`
		SyncStateDict [][3]any `json:"sync_state_dict"`
		Repr          string   `json:"repr"`
		SyncRepr      string   `json:"sync_repr"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	// gotrain prints BatchNorm as PyTorch 1.13 did (nn's fixtures); 2.x
	// adds its bias argument.
	v1 := func(r string) string { return strings.ReplaceAll(r, "affine=True, bias=True,", "affine=True,") }
	check := func(what string, m nn.Module, entries [][3]any, repr string) {
		if got := nn.Repr(m); got != v1(repr) {
			t.Errorf("%s prints as\n%s\nPyTorch:\n%s", what, got, v1(repr))
		}
		got := nn.StateDict(m)
		if len(got) != len(entries) {
			t.Fatalf("%s: %d state-dict entries, PyTorch %d", what, len(got), len(entries))
		}
		for i, e := range got {
			if w := entries[i]; e.Name != w[0] || fmt.Sprint(e.Tensor.Shape()) != fmt.Sprint(w[1]) || e.Dtype.String() != w[2] {
				t.Errorf("%s entry %d: %s %v %s, PyTorch %v %v %v", what, i, e.Name, e.Tensor.Shape(), e.Dtype, w[0], w[1], w[2])
			}
		}
	}
	m := models.MNISTNetBN()
	check("MNISTNetBN", m, want.StateDict, want.Repr)
	if _, err := ConvertSyncBatchNorm(context.Background(), m, newStatsGroups(1)[0]); err != nil {
		t.Fatal(err)
	}
	check("converted MNISTNetBN", m, want.SyncStateDict, want.SyncRepr)
}

// TestSyncBatchNormCommunication counts the reductions: one per layer in
// forward and one in backward in training, none in eval or in a world of
// one, and none in backward when the input needs no gradient.
func TestSyncBatchNormCommunication(t *testing.T) {
	ctx := context.Background()
	x := bnBatch(tensor.NewRNG(5), 4, []int{2, 2})
	shape := []int{4, bnChannels, 2, 2}
	plain := newTestBN(2)

	t.Run("eval", func(t *testing.T) {
		g := newStatsGroups(2)[0]
		b := newTestBN(2)
		NewSyncBatchNorm(ctx, g, b)
		nn.SetTrain(b, false)
		nn.SetTrain(plain, false)
		defer nn.SetTrain(plain, true)
		got := b.Forward(tensor.New(x, shape...)).Data()
		want := plain.Forward(tensor.New(x, shape...)).Data()
		if !slices.Equal(got, want) {
			t.Errorf("eval output %v, want BatchNorm's %v", got, want)
		}
		if g.calls != 0 {
			t.Errorf("eval forward ran %d reductions, want none", g.calls)
		}
	})

	t.Run("world of one", func(t *testing.T) {
		g := newStatsGroups(1)[0]
		b := newTestBN(2)
		s := NewSyncBatchNorm(ctx, g, b)
		got := bnPass(t, b.Forward, b, x, x, shape, 4)
		ref := newTestBN(2)
		want := bnPass(t, ref.Forward, ref, x, x, shape, 4)
		for _, c := range [][2][]float32{{got.out, want.out}, {got.dx, want.dx}, {got.dw, want.dw}, {clone(b.RunningVar), clone(ref.RunningVar)}} {
			if msg := closeTo(c[0], c[1], 1); msg != "" {
				t.Errorf("world of one differs from BatchNorm: %s", msg)
			}
		}
		if g.calls != 0 || s.Err() != nil {
			t.Errorf("world of one: %d reductions, error %v; want none", g.calls, s.Err())
		}
	})

	t.Run("training", func(t *testing.T) {
		gs := newStatsGroups(2)
		var wg sync.WaitGroup
		for r := range gs {
			wg.Go(func() {
				b := newTestBN(2)
				NewSyncBatchNorm(ctx, gs[r], b)
				bnPass(t, b.Forward, b, x, x, shape, 8)
				if gs[r].calls != 2 {
					t.Errorf("rank %d: forward and backward ran %d reductions, want 2 (one each)", r, gs[r].calls)
				}
				// An input that needs no gradient: no reduction in backward.
				out := b.Forward(tensor.New(x, shape...))
				if err := tensor.Sum(out, false).Backward(); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if gs[r].calls != 3 {
					t.Errorf("rank %d: a pass whose input needs no gradient ran %d reductions, want 1", r, gs[r].calls-2)
				}
			})
		}
		wg.Wait()
	})
}

func TestSyncBatchNormFailureSurfacesFromBackward(t *testing.T) {
	g := newStatsGroups(2)[0]
	broken := errors.New("peer rank 1 lost")
	g.fail = broken
	b := newTestBN(2)
	s := NewSyncBatchNorm(context.Background(), g, b)
	x := bnBatch(tensor.NewRNG(5), 4, []int{2, 2})
	shape := []int{4, bnChannels, 2, 2}
	xt := tensor.New(x, shape...)
	xt.SetRequiresGrad(true)
	out := b.Forward(xt)
	for i, v := range out.Data() {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("output %d = %v after a failed reduction, want the local statistics' finite values", i, v)
		}
	}
	err := tensor.Sum(out, false).Backward()
	if !errors.Is(err, broken) || !strings.Contains(err.Error(), "SyncBatchNorm") {
		t.Fatalf("Backward after a failed reduction: %v, want the group's error, naming SyncBatchNorm", err)
	}
	if g.calls != 1 {
		t.Errorf("%d reductions asked of the group; after the first failed, want none", g.calls)
	}
	if !slices.Equal(clone(b.RunningMean), []float32{0.5, -1, 2}) {
		t.Errorf("running mean %v changed by a pass whose statistics failed", b.RunningMean.Data())
	}
	b.Forward(tensor.New(x, shape...))
	if g.calls != 1 || !errors.Is(s.Err(), broken) {
		t.Errorf("after the failure: %d reductions, Err %v; want 1 and the group's error", g.calls, s.Err())
	}
}

// SyncBatchNorm may share DDP's group only when DDP reduces inline, on
// the goroutine running backward, so that all collectives keep one order.
func TestNewRefusesSyncBatchNormOnOverlappingGroup(t *testing.T) {
	for _, overlap := range []bool{true, false} {
		gs := newStatsGroups(2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range gs {
			wg.Go(func() {
				ctx := context.Background()
				b := newTestBN(2)
				model := nn.Sequential(nn.Conv2d(1, bnChannels, 1), b)
				if _, err := ConvertSyncBatchNorm(ctx, model, gs[r]); err != nil {
					errs[r] = err
					return
				}
				dm, err := New(ctx, model, gs[r], OverlapComm(overlap))
				if err != nil {
					errs[r] = err
					return
				}
				defer dm.Close()
				x := tensor.Randn(tensor.NewRNG(uint64(r)), 3, 1, 2, 2)
				errs[r] = tensor.Sum(dm.Forward(x), false).Backward()
			})
		}
		wg.Wait()
		for r, err := range errs {
			switch {
			case overlap && (!errors.Is(err, ErrSyncBatchNormGroup) || !strings.Contains(err.Error(), "layer 1")):
				t.Errorf("rank %d: New with overlapping reductions on SyncBatchNorm's group: %v, want ErrSyncBatchNormGroup naming layer 1", r, err)
			case !overlap && err != nil:
				t.Errorf("rank %d: inline reductions on SyncBatchNorm's group: %v", r, err)
			}
		}
	}
}

// The multi-process test: syncBNWorker trains syncBNModel on its unequal
// share of every batch with DDP over a real TCP group and SyncBatchNorm over
// a group of its own, and writes its parameters and buffers to
// $OUT/rank<r>.bin.
var syncBNSizes = []int{3, 7, 2}

const syncBNSteps = 4

func syncBNModel() *nn.SequentialLayer {
	nn.SetSeed(11)
	return nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 4))
}

// syncBNState is the model's parameters and buffers, flattened.
func syncBNState(m nn.Module) []float32 {
	var out []float32
	for _, e := range nn.StateDict(m) {
		out = append(out, e.Tensor.Data()...)
	}
	return out
}

// syncBNTrain trains m on the slice [lo, hi) of every batch of syncBNSizes'
// total, the loss scaled so that DDP's average of world ranks' gradients is
// the gradient of the whole batch's mean loss.
func syncBNTrain(m nn.Module, fwd func(*tensor.Tensor) *tensor.Tensor, params []*tensor.Tensor, lo, hi, world int) error {
	total := 0
	for _, n := range syncBNSizes {
		total += n
	}
	x, y := fixedData(syncBNSteps * total)
	opt := optim.NewSGD(params, 0.1)
	for s := 0; s < syncBNSteps; s++ {
		opt.ZeroGrad()
		bx, by := slice(x, y, s*total+lo, s*total+hi)
		loss := tensor.MulScalar(nn.CrossEntropy(fwd(bx), by), float32((hi-lo)*world)/float32(total))
		if err := loss.Backward(); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		opt.Step()
	}
	return nil
}

func syncBNWorker() error {
	ctx := context.Background()
	g, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://", AgentStore: true, Timeout: 20 * time.Second})
	if err != nil {
		return err
	}
	defer g.Destroy()
	rank, world := g.Rank(), g.Size()
	all := make([]int, world)
	for r := range all {
		all[r] = r
	}
	// DDP's reductions may run beside backward: SyncBatchNorm's go over a
	// group of their own.
	bnGroup, err := g.NewGroup(ctx, all)
	if err != nil {
		return err
	}
	m := syncBNModel()
	if _, err := ConvertSyncBatchNorm(ctx, m, bnGroup); err != nil {
		return err
	}
	dm, err := New(ctx, m, g, OverlapComm(true))
	if err != nil {
		return err
	}
	defer dm.Close()
	lo := 0
	for _, n := range syncBNSizes[:rank] {
		lo += n
	}
	if err := syncBNTrain(m, dm.Forward, dm.Parameters(), lo, lo+syncBNSizes[rank], world); err != nil {
		return err
	}
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, syncBNState(m))
	return os.WriteFile(filepath.Join(os.Getenv("OUT"), "rank"+strconv.Itoa(rank)+".bin"), buf.Bytes(), 0o644)
}

func TestMultiProcessSyncBatchNormMatchesWholeBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	world := len(syncBNSizes)
	res, dir := spawnWorker(t, "syncbn", world)
	for r, pr := range res {
		if pr.err != nil {
			t.Fatalf("rank %d failed: %v\n%s", r, pr.err, pr.out)
		}
	}
	ref := syncBNModel()
	total := 0
	for _, n := range syncBNSizes {
		total += n
	}
	if err := syncBNTrain(ref, ref.Forward, nn.Parameters(ref), 0, total, 1); err != nil {
		t.Fatal(err)
	}
	want := syncBNState(ref)
	r0 := readParams(t, filepath.Join(dir, "rank0.bin"))
	if msg := closeTo(r0, want, 5); msg != "" {
		t.Errorf("rank 0's parameters and buffers after %d steps differ from BatchNorm on the whole batch: %s", syncBNSteps, msg)
	}
	for r := 1; r < world; r++ {
		if got := readParams(t, filepath.Join(dir, "rank"+strconv.Itoa(r)+".bin")); !slices.Equal(got, r0) {
			t.Errorf("rank %d's parameters and buffers differ from rank 0's: replicas not identical", r)
		}
	}
}

// BenchmarkSyncBatchNorm times a training forward and backward of
// BatchNorm2d(64) on [16, 64, 24, 24] per rank: plain BatchNorm in one
// process, and SyncBatchNorm on each of 2 in-process ranks (its sums and
// two reductions, without a network).
func BenchmarkSyncBatchNorm(b *testing.B) {
	const n, c, hw = 16, 64, 24
	x := tensor.Randn(tensor.NewRNG(1), n, c, hw, hw).Data()
	step := func(b *testing.B, layer *nn.BatchNormLayer) {
		xt := tensor.New(x, n, c, hw, hw)
		xt.SetRequiresGrad(true)
		if err := tensor.Sum(layer.Forward(xt), false).Backward(); err != nil {
			b.Error(err)
		}
	}
	b.Run("BatchNorm", func(b *testing.B) {
		layer := nn.BatchNorm2d(c)
		for b.Loop() {
			step(b, layer)
		}
	})
	b.Run("SyncBatchNorm-2ranks", func(b *testing.B) {
		gs := newStatsGroups(2)
		layers := []*nn.BatchNormLayer{nn.BatchNorm2d(c), nn.BatchNorm2d(c)}
		NewSyncBatchNorm(context.Background(), gs[0], layers[0])
		NewSyncBatchNorm(context.Background(), gs[1], layers[1])
		done := make(chan struct{})
		steps := make(chan struct{})
		go func() { // rank 1 follows rank 0 step by step
			defer close(done)
			for range steps {
				step(b, layers[1])
			}
		}()
		for b.Loop() {
			steps <- struct{}{}
			step(b, layers[0])
		}
		close(steps)
		<-done
	})
}
