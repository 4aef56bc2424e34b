package fsdp

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// runRanks runs f on n in-process ranks joined by a real process group
// (file store, TCP or shared-memory transport) and fails the test with
// every rank's error.
func runRanks(t *testing.T, n int, f func(ctx context.Context, g *distributed.Group) error) {
	t.Helper()
	store := "file://" + filepath.Join(t.TempDir(), "store")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			g, err := distributed.Init(ctx, distributed.Config{InitMethod: store, Rank: rank, WorldSize: n, Timeout: 2 * time.Minute})
			if err != nil {
				errs[rank] = err
				return
			}
			defer g.Destroy()
			errs[rank] = f(ctx, g)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// buildMu serialises model construction: nn's init generator is global.
var buildMu sync.Mutex

// workload is a model and how a rank trains it for one step.
type workload struct {
	build  func() nn.Module
	newOpt func(params []*tensor.Tensor, dim func(*tensor.Tensor) int) (optim.Optimizer, optim.Scheduler)
	input  func(step, rank int) (x *tensor.Tensor, loss func(out *tensor.Tensor) *tensor.Tensor)
	clip   bool
}

// gptConfig is a GPT small enough to train in-process at world 4. It has
// no biases: the attention's key bias has a gradient that is exactly zero
// in exact arithmetic, so in float32 it is rounding noise, which AdamW
// normalises into steps up to the learning rate. Any change in the order
// of a reduction moves it, DDP's own with another bucket size included,
// so it cannot be compared with DDP's. (The MNIST test covers biases.)
var gptConfig = models.GPTConfig{VocabSize: 19, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 8}

func gptWorkload() workload {
	const B, T = 2, 6
	return workload{
		build: func() nn.Module {
			buildMu.Lock()
			defer buildMu.Unlock()
			m := models.GPT(gptConfig)
			m.ResetParameters(tensor.NewRNG(5))
			return m
		},
		newOpt: func(params []*tensor.Tensor, dim func(*tensor.Tensor) int) (optim.Optimizer, optim.Scheduler) {
			var decay, noDecay []*tensor.Tensor
			for _, p := range params {
				if dim(p) >= 2 {
					decay = append(decay, p)
				} else {
					noDecay = append(noDecay, p)
				}
			}
			opt := optim.NewAdamW(decay, 6e-3, optim.WeightDecay(0.1))
			opt.AddParamGroup(noDecay, optim.WeightDecay(0))
			warm := optim.NewLinearLR(opt, 0.01, 1, 5)
			cos := optim.NewCosineAnnealingLR(opt, 20, 1e-3)
			return opt, optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{5})
		},
		input: func(step, rank int) (*tensor.Tensor, func(*tensor.Tensor) *tensor.Tensor) {
			rng := tensor.NewRNG(uint64(1000*step + rank + 1))
			var ids, targets []int
			for range B * T {
				ids = append(ids, rng.Intn(gptConfig.VocabSize))
				targets = append(targets, rng.Intn(gptConfig.VocabSize))
			}
			return nn.IDTensor(ids, B, T), func(out *tensor.Tensor) *tensor.Tensor {
				return tensor.CrossEntropyIgnore(out, targets, models.IgnoreIndex, "sum")
			}
		},
		clip: true,
	}
}

func mnistWorkload() workload {
	const B = 2
	return workload{
		build: func() nn.Module {
			buildMu.Lock()
			defer buildMu.Unlock()
			nn.SetSeed(3)
			return models.MNISTNetBN()
		},
		newOpt: func(params []*tensor.Tensor, _ func(*tensor.Tensor) int) (optim.Optimizer, optim.Scheduler) {
			return optim.NewSGD(params, 0.05, optim.Momentum(0.9)), nil
		},
		input: func(step, rank int) (*tensor.Tensor, func(*tensor.Tensor) *tensor.Tensor) {
			rng := tensor.NewRNG(uint64(1000*step + rank + 1))
			x := tensor.Zeros(B, 1, 28, 28)
			rng.FillNormal(x, 0, 1)
			labels := make([]int, B)
			for i := range labels {
				labels[i] = rng.Intn(10)
			}
			return x, func(out *tensor.Tensor) *tensor.Tensor { return tensor.CrossEntropy(out, labels, "mean") }
		},
	}
}

// result is one rank's losses and final full state.
type result struct {
	losses []float32
	state  map[string][]float32
}

// trainDDP trains w under ddp.Model for steps steps, accum micro-batches
// each (all but the last under NoSync).
func trainDDP(ctx context.Context, g *distributed.Group, w workload, steps, accum int) (result, error) {
	m := w.build()
	dm, err := ddp.New(ctx, m, g)
	if err != nil {
		return result{}, err
	}
	defer dm.Close()
	opt, sched := w.newOpt(dm.Parameters(), func(p *tensor.Tensor) int { return p.Dim() })
	var res result
	for s := range steps {
		opt.ZeroGrad()
		for k := range accum {
			x, lossOf := w.input(s*accum+k, g.Rank())
			var loss *tensor.Tensor
			back := func() error {
				loss = lossOf(dm.Forward(x))
				return loss.Backward()
			}
			if k < accum-1 {
				err = dm.NoSync(back)
			} else {
				err = back()
			}
			if err != nil {
				return res, err
			}
			res.losses = append(res.losses, loss.Item())
		}
		if w.clip {
			optim.ClipGradNorm(dm.Parameters(), 1.0)
		}
		opt.Step()
		if sched != nil {
			sched.Step()
		}
	}
	res.state = map[string][]float32{}
	for _, e := range nn.StateDict(m) {
		res.state[e.Name] = append([]float32(nil), e.Tensor.Data()...)
	}
	return res, nil
}

// trainFSDP is trainDDP under the sharded wrapper.
func trainFSDP(ctx context.Context, g *distributed.Group, w workload, steps, accum int, opts ...Option) (result, error) {
	fm, err := New(ctx, w.build(), g, opts...)
	if err != nil {
		return result{}, err
	}
	defer fm.Close()
	opt, sched := w.newOpt(fm.Parameters(), func(p *tensor.Tensor) int {
		info, ok := fm.ShardOf(p)
		if !ok {
			panic("not a shard")
		}
		return info.Dim()
	})
	var res result
	for s := range steps {
		opt.ZeroGrad()
		for k := range accum {
			x, lossOf := w.input(s*accum+k, g.Rank())
			var loss *tensor.Tensor
			back := func() error {
				out, err := fm.ForwardErr(x)
				if err != nil {
					return err
				}
				loss = lossOf(out)
				return loss.Backward()
			}
			if k < accum-1 {
				err = fm.NoSync(back)
			} else {
				err = back()
			}
			if err != nil {
				return res, err
			}
			res.losses = append(res.losses, loss.Item())
		}
		if w.clip {
			if _, err := fm.ClipGradNorm(1.0); err != nil {
				return res, err
			}
		}
		opt.Step()
		if sched != nil {
			sched.Step()
		}
	}
	sd, err := fm.FullStateDict(ctx)
	if err != nil {
		return res, err
	}
	res.state = map[string][]float32{}
	for _, e := range sd {
		res.state[e.Name] = e.Tensor.Data()
	}
	return res, nil
}

// sameLoss reports whether a and b agree to 5 significant digits.
func sameLoss(a, b float32) bool {
	return math.Abs(float64(a)-float64(b)) <= 5e-5*math.Abs(float64(b))
}

// compare checks got against the DDP reference: losses to 5 significant
// digits, every final weight within float32 reduction noise.
func compare(t *testing.T, label string, ref, got result) {
	t.Helper()
	if len(got.losses) != len(ref.losses) {
		t.Fatalf("%s: %d losses, DDP %d", label, len(got.losses), len(ref.losses))
	}
	for i := range ref.losses {
		if !sameLoss(got.losses[i], ref.losses[i]) {
			t.Errorf("%s: loss %d = %.7g, DDP %.7g", label, i, got.losses[i], ref.losses[i])
		}
	}
	if len(got.state) != len(ref.state) {
		t.Errorf("%s: state has %d entries, DDP %d", label, len(got.state), len(ref.state))
	}
	worst, where := 0.0, ""
	for k, rv := range ref.state {
		gv, ok := got.state[k]
		if !ok || len(gv) != len(rv) {
			t.Errorf("%s: state %s: %d values, DDP %d", label, k, len(gv), len(rv))
			continue
		}
		for i := range rv {
			if d := math.Abs(float64(gv[i]) - float64(rv[i])); d > worst {
				worst, where = d, fmt.Sprintf("%s[%d] = %g, DDP %g", k, i, gv[i], rv[i])
			}
		}
	}
	t.Logf("%s: largest weight difference from DDP %.3g", label, worst)
	if worst > 1e-5 {
		t.Errorf("%s: final weights differ from DDP's by up to %g at %s", label, worst, where)
	}
}

func exactness(t *testing.T, world int, w workload, steps int, strategies []ShardingStrategy, extra ...Option) {
	refs := make([]result, world)
	got := make([][]result, len(strategies))
	for i := range got {
		got[i] = make([]result, world)
	}
	runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
		r := g.Rank()
		var err error
		if refs[r], err = trainDDP(ctx, g, w, steps, 1); err != nil {
			return fmt.Errorf("ddp: %w", err)
		}
		for i, s := range strategies {
			opts := append([]Option{Strategy(s)}, extra...)
			if got[i][r], err = trainFSDP(ctx, g, w, steps, 1, opts...); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
	for i, s := range strategies {
		for r := range world {
			compare(t, fmt.Sprintf("%s world %d rank %d", s, world, r), refs[r], got[i][r])
		}
	}
}

var allFlat = []ShardingStrategy{NoShard, ShardOptimizer, ShardGradOp, FullShard}

// TestGPTMatchesDDP trains a small GPT (AdamW with a decay and a no-decay
// group, warm-up then cosine, gradient clipping at 1.0) for 25 steps
// under each strategy and under DDP from the same weights and data: the
// losses agree to 5 significant digits and the final weights to float32
// reduction noise. Worlds 3 and 4 shard parameters unevenly (padding).
func TestGPTMatchesDDP(t *testing.T) {
	for _, world := range []int{2, 3, 4} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			exactness(t, world, gptWorkload(), 25, allFlat)
		})
	}
}

// TestHybridMatchesDDP runs HybridShard on a 2×2 topology (two in-process
// "nodes" of two ranks, given with Nodes since one host has one real
// node): the same losses and weights as DDP.
func TestHybridMatchesDDP(t *testing.T) {
	exactness(t, 4, gptWorkload(), 20, []ShardingStrategy{HybridShard}, Nodes([][]int{{0, 1}, {2, 3}}))
}

// TestMNISTMatchesDDP trains the MNIST CNN with BatchNorm (buffers
// broadcast from rank 0 as DDP does) with SGD and momentum.
func TestMNISTMatchesDDP(t *testing.T) {
	exactness(t, 2, mnistWorkload(), 8, allFlat)
}

// TestGradientAccumulationMatchesDDP accumulates three micro-batches per
// step, two of them under NoSync.
func TestGradientAccumulationMatchesDDP(t *testing.T) {
	const world, steps, accum = 3, 8, 3
	w := gptWorkload()
	strategies := []ShardingStrategy{ShardGradOp, FullShard}
	refs := make([]result, world)
	got := make([][]result, len(strategies))
	for i := range got {
		got[i] = make([]result, world)
	}
	runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
		r := g.Rank()
		var err error
		if refs[r], err = trainDDP(ctx, g, w, steps, accum); err != nil {
			return err
		}
		for i, s := range strategies {
			if got[i][r], err = trainFSDP(ctx, g, w, steps, accum, Strategy(s)); err != nil {
				return err
			}
		}
		return nil
	})
	for i, s := range strategies {
		for r := range world {
			compare(t, fmt.Sprintf("%s rank %d", s, r), refs[r], got[i][r])
		}
	}
}

// TestUncoveredParameters names the parameters no unit covers.
func TestUncoveredParameters(t *testing.T) {
	runRanks(t, 1, func(ctx context.Context, g *distributed.Group) error {
		m := gptWorkload().build().(*models.GPTModel)
		_, err := New(ctx, m, g, Units(m.Blocks[0], m.Blocks[1]))
		if err == nil {
			return fmt.Errorf("New succeeded with parameters outside every unit")
		}
		for _, want := range []string{"covered by no unit", "transformer.wte.weight", "transformer.ln_f.weight"} {
			if !strings.Contains(err.Error(), want) {
				return fmt.Errorf("error %q does not mention %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "transformer.h.0") {
			return fmt.Errorf("error %q lists a covered parameter", err)
		}
		if strings.Count(err.Error(), "\n") != 0 {
			return fmt.Errorf("error is not one line: %q", err)
		}
		return nil
	})
}

// TestRanksDisagree: ranks asking for different strategies, or holding
// different shapes, fail on every rank, naming both sides.
func TestRanksDisagree(t *testing.T) {
	errs := make([]error, 2)
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		s := FullShard
		if g.Rank() == 1 {
			s = ShardGradOp
		}
		_, errs[g.Rank()] = New(ctx, gptWorkload().build(), g, Strategy(s))
		return nil
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 0 uses strategy full, rank 1 uses zero2") {
			t.Errorf("rank %d: got %v, want the strategies of both ranks", r, err)
		}
	}
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		cfg := gptConfig
		if g.Rank() == 1 {
			cfg.NEmbd = 12
		}
		buildMu.Lock()
		m := models.GPT(cfg)
		buildMu.Unlock()
		_, errs[g.Rank()] = New(ctx, m, g)
		return nil
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), `"transformer.wte.weight" differs in shape: rank 0: unit 2 shape [19 8]; rank 1: unit 2 shape [19 12]`) {
			t.Errorf("rank %d: got %v, want both shapes of transformer.wte.weight", r, err)
		}
	}
}

// TestTiedWeightSharedOnce: the GPT's tied wte/lm_head tensor is one
// shard, and after training both names hold the same values.
func TestTiedWeightSharedOnce(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		m := gptWorkload().build().(*models.GPTModel)
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		n := 0
		for _, s := range fm.NamedShards() {
			if strings.Contains(s.Name, "wte") || strings.Contains(s.Name, "lm_head") {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%d shards for the tied weight, want 1", n)
		}
		if _, err := trainSteps(fm, gptWorkload(), g.Rank(), 3); err != nil {
			return err
		}
		sd, err := fm.FullStateDict(ctx)
		if err != nil {
			return err
		}
		var wte, head []float32
		for _, e := range sd {
			switch e.Name {
			case "transformer.wte.weight":
				wte = e.Tensor.Data()
			case "lm_head.weight":
				head = e.Tensor.Data()
			}
		}
		if len(wte) != 19*8 || fmt.Sprint(wte) != fmt.Sprint(head) {
			return fmt.Errorf("wte (%d values) and lm_head (%d values) differ after training", len(wte), len(head))
		}
		return nil
	})
}

// trainSteps runs steps plain steps of w on fm and returns the last loss.
func trainSteps(fm *Model, w workload, rank, steps int) (float32, error) {
	opt, _ := w.newOpt(fm.Parameters(), func(*tensor.Tensor) int { return 1 })
	var last float32
	for s := range steps {
		opt.ZeroGrad()
		x, lossOf := w.input(s, rank)
		out, err := fm.ForwardErr(x)
		if err != nil {
			return 0, err
		}
		loss := lossOf(out)
		if err := loss.Backward(); err != nil {
			return 0, err
		}
		last = loss.Item()
		opt.Step()
	}
	return last, nil
}

// TestFullShardReleasesParameters: between steps a FullShard module holds
// no parameter values, only the shards (a third of each, padded).
func TestFullShardReleasesParameters(t *testing.T) {
	runRanks(t, 3, func(ctx context.Context, g *distributed.Group) error {
		m := gptWorkload().build()
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		if _, err := trainSteps(fm, gptWorkload(), g.Rank(), 2); err != nil {
			return err
		}
		for _, p := range nn.NamedParameters(m) {
			if p.Tensor.Len() != 0 || p.Tensor.Grad() != nil {
				return fmt.Errorf("%s holds %d values and gradient %v after backward", p.Name, p.Tensor.Len(), p.Tensor.Grad() != nil)
			}
		}
		total := 0
		for _, s := range fm.Parameters() {
			info, _ := fm.ShardOf(s)
			n := 1
			for _, d := range info.Shape {
				n *= d
			}
			if want := (n + 2) / 3; s.Len() != want {
				return fmt.Errorf("%s: shard of %d values, want %d", info.Name, s.Len(), want)
			}
			if info.Offset != g.Rank()*s.Len() && info.Len != 0 {
				return fmt.Errorf("%s: shard offset %d on rank %d", info.Name, info.Offset, g.Rank())
			}
			total += s.Len()
		}
		if full := models.GPT(gptConfig).NumParams(false); total*3 < full || total*3 > full+3*len(fm.Parameters()) {
			return fmt.Errorf("shards hold %d values of a %d-parameter model at world 3", total, full)
		}
		return nil
	})
}

// TestShardedStateDictAcrossWorlds saves the pieces of a FullShard model
// at world 2 and loads them at world 3: the full state is the same.
func TestShardedStateDictAcrossWorlds(t *testing.T) {
	var mu sync.Mutex
	var pieces []Piece
	var want map[string][]float32
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		fm, err := New(ctx, gptWorkload().build(), g)
		if err != nil {
			return err
		}
		defer fm.Close()
		if _, err := trainSteps(fm, gptWorkload(), g.Rank(), 2); err != nil {
			return err
		}
		sd, err := fm.FullStateDict(ctx)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		pieces = append(pieces, fm.ShardedStateDict()...)
		if g.Rank() == 0 {
			want = map[string][]float32{}
			for _, e := range sd {
				want[e.Name] = e.Tensor.Data()
			}
		}
		return nil
	})
	missing := make([]error, 3)
	runRanks(t, 3, func(ctx context.Context, g *distributed.Group) error {
		m := gptWorkload().build()
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		if err := fm.LoadShardedStateDict(pieces); err != nil {
			return err
		}
		sd, err := fm.FullStateDict(ctx)
		if err != nil {
			return err
		}
		for _, e := range sd {
			if fmt.Sprint(e.Tensor.Data()) != fmt.Sprint(want[e.Name]) {
				return fmt.Errorf("%s differs after loading the world-2 pieces at world 3", e.Name)
			}
		}
		// Without its first piece, the ranks whose shards it overlapped
		// name the missing element; the others load.
		err = fm.LoadShardedStateDict(pieces[1:])
		missing[g.Rank()] = err
		if err != nil && !strings.Contains(err.Error(), "is in no piece of the checkpoint") {
			return fmt.Errorf("loading with a piece missing: %v", err)
		}
		return nil
	})
	if missing[0] == nil && missing[1] == nil && missing[2] == nil {
		t.Errorf("every rank loaded the checkpoint without %s's piece at %d", pieces[0].Key, pieces[0].Offset)
	}
}

// trainJoined trains w inside a Join for steps[rank] steps: with the
// sharded wrapper when opts is non-nil, else with DDP. It returns the
// rank's losses and final full state.
func trainJoined(ctx context.Context, g *distributed.Group, w workload, steps []int, sharded bool, opts ...Option) (result, error) {
	var res result
	var forward func(*tensor.Tensor) (*tensor.Tensor, error)
	var opt optim.Optimizer
	var sched optim.Scheduler
	var clip func() error
	var join func(context.Context, func(context.Context) error, ...ddp.JoinOption) error
	var final func() (map[string][]float32, error)
	if sharded {
		fm, err := New(ctx, w.build(), g, opts...)
		if err != nil {
			return res, err
		}
		defer fm.Close()
		opt, sched = w.newOpt(fm.Parameters(), func(p *tensor.Tensor) int { i, _ := fm.ShardOf(p); return i.Dim() })
		forward, join = fm.ForwardErr, fm.Join
		clip = func() error { _, err := fm.ClipGradNorm(1.0); return err }
		fm.SetJoinStep(func() error {
			if err := clip(); err != nil {
				return err
			}
			opt.Step()
			sched.Step()
			return nil
		})
		final = func() (map[string][]float32, error) {
			sd, err := fm.FullStateDict(ctx)
			out := map[string][]float32{}
			for _, e := range sd {
				out[e.Name] = e.Tensor.Data()
			}
			return out, err
		}
	} else {
		m := w.build()
		dm, err := ddp.New(ctx, m, g)
		if err != nil {
			return res, err
		}
		defer dm.Close()
		opt, sched = w.newOpt(dm.Parameters(), func(p *tensor.Tensor) int { return p.Dim() })
		forward = func(x *tensor.Tensor) (*tensor.Tensor, error) { return dm.Forward(x), nil }
		join = dm.Join
		clip = func() error { optim.ClipGradNorm(dm.Parameters(), 1.0); return nil }
		final = func() (map[string][]float32, error) {
			out := map[string][]float32{}
			for _, e := range nn.StateDict(m) {
				out[e.Name] = e.Tensor.Data()
			}
			return out, nil
		}
	}
	err := join(ctx, func(ctx context.Context) error {
		for s := range steps[g.Rank()] {
			opt.ZeroGrad()
			x, lossOf := w.input(s, g.Rank())
			out, err := forward(x)
			if err != nil {
				return err
			}
			loss := lossOf(out)
			if err := loss.Backward(); err != nil {
				return err
			}
			res.losses = append(res.losses, loss.Item())
			if err := clip(); err != nil {
				return err
			}
			opt.Step()
			sched.Step()
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.state, err = final()
	return res, err
}

// TestJoinMatchesDDP: rank 1 runs out of inputs after 3 steps of 6. Under
// ddp.Join the sharded model trains as DDP does (the joined rank keeps
// updating its shards through its join step), and both ranks end with
// the same full model.
func TestJoinMatchesDDP(t *testing.T) {
	steps := []int{6, 3}
	strategies := []ShardingStrategy{NoShard, ShardGradOp, FullShard}
	refs := make([]result, 2)
	got := make([][]result, len(strategies))
	for i := range got {
		got[i] = make([]result, 2)
	}
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		var err error
		if refs[g.Rank()], err = trainJoined(ctx, g, gptWorkload(), steps, false); err != nil {
			return fmt.Errorf("ddp: %w", err)
		}
		for i, s := range strategies {
			if got[i][g.Rank()], err = trainJoined(ctx, g, gptWorkload(), steps, true, Strategy(s)); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
	for i, s := range strategies {
		for r := range 2 {
			compare(t, fmt.Sprintf("%s joined rank %d", s, r), refs[r], got[i][r])
		}
	}
}

// TestBF16AutocastMatchesDDP trains under bf16 autocast (emulated where
// the CPU has no bf16 kernel): the sharded strategies still give DDP's
// losses and weights.
func TestBF16AutocastMatchesDDP(t *testing.T) {
	if !tensor.BF16Native() {
		defer tensor.SetBF16Emulation(tensor.SetBF16Emulation(true))
	}
	// Autocast is process-wide: it covers all in-process ranks at once.
	err := tensor.Autocast(tensor.BF16, func() {
		exactness(t, 2, gptWorkload(), 10, []ShardingStrategy{NoShard, ShardGradOp, FullShard})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoSyncKeepsFullGradients: inside NoSync a FullShard backward leaves
// the full gradients in the module's parameters and the shards' untouched;
// the next synchronised backward reduces them into the shards and frees
// the full parameters and gradients.
func TestNoSyncKeepsFullGradients(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		m := gptWorkload().build()
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		w := gptWorkload()
		pass := func(step int) error {
			x, lossOf := w.input(step, g.Rank())
			out, err := fm.ForwardErr(x)
			if err != nil {
				return err
			}
			return lossOf(out).Backward()
		}
		if err := fm.NoSync(func() error { return pass(0) }); err != nil {
			return err
		}
		for _, p := range fm.params {
			if p.t.Len() != p.numel || p.t.Grad() == nil || p.t.Grad().Len() != p.numel {
				return fmt.Errorf("%s: inside NoSync the full parameter (%d values) and gradient were not kept", p.name, p.t.Len())
			}
			if p.shard.Grad() != nil {
				return fmt.Errorf("%s: NoSync backward wrote the shard's gradient", p.name)
			}
		}
		if err := pass(1); err != nil {
			return err
		}
		for _, p := range fm.params {
			if p.t.Len() != 0 || p.t.Grad() != nil {
				return fmt.Errorf("%s: full values or gradient kept after the synchronised backward", p.name)
			}
			if p.shard.Grad() == nil {
				return fmt.Errorf("%s: no shard gradient after the synchronised backward", p.name)
			}
		}
		return nil
	})
}

// TestMixedPrecisionBF16: with MixedPrecision{Param: BF16} the forward
// pass sees the float32 shards rounded to bfloat16 while FullStateDict
// still gives the float32 master weights; with Reduce: BF16 each shard's
// gradient is, bit for bit, the rank-order float32 sum of every rank's
// local gradient halved and rounded to bfloat16.
func TestMixedPrecisionBF16(t *testing.T) {
	w := gptWorkload()
	// Each rank's local gradient, from a plain single-process backward.
	local := make([]map[string][]float32, 2)
	var master map[string][]float32
	for r := range 2 {
		m := w.build()
		x, lossOf := w.input(0, r)
		if err := lossOf(m.Forward(x)).Backward(); err != nil {
			t.Fatal(err)
		}
		local[r] = map[string][]float32{}
		master = map[string][]float32{}
		for _, p := range nn.NamedParameters(m) {
			local[r][p.Name] = p.Tensor.Grad().Data()
			master[p.Name] = p.Tensor.Data()
		}
	}
	bf := func(v float32) float32 { return tensor.ToBFloat16(v).Float32() }
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		for _, s := range []ShardingStrategy{NoShard, ShardOptimizer, ShardGradOp, FullShard} {
			// Parameters gathered in bf16.
			m := w.build()
			fm, err := New(ctx, m, g, Strategy(s), MixedPrecision(MixedPrecisionPolicy{Param: tensor.BF16}))
			if err != nil {
				return err
			}
			x, lossOf := w.input(0, g.Rank())
			out, err := fm.ForwardErr(x)
			if err != nil {
				return err
			}
			if s != NoShard { // NoShard gathers nothing: its replicas are float32
				for _, p := range nn.NamedParameters(m) {
					for k, v := range p.Tensor.Data() {
						if want := bf(master[p.Name][k]); v != want {
							return fmt.Errorf("%s: forward sees %s[%d] = %g, want bf16 %g", s, p.Name, k, v, want)
						}
					}
				}
			}
			if err := lossOf(out).Backward(); err != nil {
				return err
			}
			sd, err := fm.FullStateDict(ctx)
			if err != nil {
				return err
			}
			for _, e := range sd {
				if want, ok := master[e.Name]; ok && fmt.Sprint(e.Tensor.Data()) != fmt.Sprint(want) {
					return fmt.Errorf("%s: FullStateDict's %s is not the float32 master weight", s, e.Name)
				}
			}
			fm.Close()

			// Gradients reduced in bf16.
			fm, err = New(ctx, w.build(), g, Strategy(s), MixedPrecision(MixedPrecisionPolicy{Reduce: tensor.BF16}))
			if err != nil {
				return err
			}
			if out, err = fm.ForwardErr(x); err != nil {
				return err
			}
			if err := lossOf(out).Backward(); err != nil {
				return err
			}
			for _, sh := range fm.Parameters() {
				info, _ := fm.ShardOf(sh)
				got := sh.Grad().Data()
				if s == NoShard {
					info.Offset, info.Len = 0, len(got)
				}
				for k := range info.Len {
					e := info.Offset + k
					want := bf(local[0][info.Name][e]*0.5) + bf(local[1][info.Name][e]*0.5)
					if got[k] != want {
						return fmt.Errorf("%s: %s gradient[%d] = %g, want %g", s, info.Name, e, got[k], want)
					}
				}
			}
			fm.Close()
		}
		return nil
	})
}

// stepper is a FullShard GPT with its optimizer and schedule.
type stepper struct {
	fm    *Model
	opt   optim.Optimizer
	sched optim.Scheduler
	order []*tensor.Tensor // the shards in the optimizer's order
}

func newStepper(ctx context.Context, g *distributed.Group, w workload) (*stepper, error) {
	fm, err := New(ctx, w.build(), g)
	if err != nil {
		return nil, err
	}
	st := &stepper{fm: fm}
	var decay, other []*tensor.Tensor
	for _, p := range fm.Parameters() {
		if info, _ := fm.ShardOf(p); info.Dim() >= 2 {
			decay = append(decay, p)
		} else {
			other = append(other, p)
		}
	}
	st.order = append(decay, other...)
	st.opt, st.sched = w.newOpt(st.order, func(p *tensor.Tensor) int { i, _ := fm.ShardOf(p); return i.Dim() })
	return st, nil
}

// steps trains steps [from, to) and returns their losses.
func (st *stepper) steps(w workload, rank, from, to int) ([]float32, error) {
	var losses []float32
	for s := from; s < to; s++ {
		st.opt.ZeroGrad()
		x, lossOf := w.input(s, rank)
		out, err := st.fm.ForwardErr(x)
		if err != nil {
			return nil, err
		}
		loss := lossOf(out)
		if err := loss.Backward(); err != nil {
			return nil, err
		}
		losses = append(losses, loss.Item())
		if _, err := st.fm.ClipGradNorm(1.0); err != nil {
			return nil, err
		}
		st.opt.Step()
		st.sched.Step()
	}
	return losses, nil
}

// assemble joins pieces into full flattened tensors.
func assemble(pieces []Piece) map[string][]float32 {
	out := map[string][]float32{}
	for _, pc := range pieces {
		n := 1
		for _, d := range pc.GlobalShape {
			n *= d
		}
		if out[pc.Key] == nil {
			out[pc.Key] = make([]float32, n)
		}
		copy(out[pc.Key][pc.Offset:], pc.Data)
	}
	return out
}

// TestShardedCheckpointResume saves the model's and the optimizer's
// pieces after 2 of 5 steps and resumes from them: the resumed run's
// losses and final weights are bitwise those of an uninterrupted one. The
// same pieces load at world 3, where the ranks' pieces reassemble into the
// same full tensors.
func TestShardedCheckpointResume(t *testing.T) {
	w := gptWorkload()
	var mu sync.Mutex
	var pieces, optPieces []Piece
	meta := make([]map[string]string, 2)
	schedState := make([]optim.State, 2)
	full := make([][]float32, 2)
	resumed := make([][]float32, 2)
	fullState := make([][]nn.Named, 2)
	resumedState := make([][]nn.Named, 2)
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		r := g.Rank()
		st, err := newStepper(ctx, g, w)
		if err != nil {
			return err
		}
		if full[r], err = st.steps(w, r, 0, 5); err != nil {
			return err
		}
		if fullState[r], err = st.fm.FullStateDict(ctx); err != nil {
			return err
		}
		st.fm.Close()

		if st, err = newStepper(ctx, g, w); err != nil {
			return err
		}
		if _, err := st.steps(w, r, 0, 2); err != nil {
			return err
		}
		op, m, err := st.fm.OptimizerShardedState(st.opt.StateDict(), st.order)
		if err != nil {
			return err
		}
		mu.Lock()
		pieces = append(pieces, st.fm.ShardedStateDict()...)
		optPieces = append(optPieces, op...)
		meta[r], schedState[r] = m, st.sched.StateDict()
		mu.Unlock()
		st.fm.Close()
		return nil
	})
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		r := g.Rank()
		st, err := newStepper(ctx, g, w)
		if err != nil {
			return err
		}
		defer st.fm.Close()
		if err := st.fm.LoadShardedStateDict(pieces); err != nil {
			return err
		}
		if err := st.fm.LoadOptimizerShardedState(st.opt, st.order, optPieces, meta[r]); err != nil {
			return err
		}
		if err := st.sched.LoadStateDict(schedState[r]); err != nil {
			return err
		}
		if resumed[r], err = st.steps(w, r, 2, 5); err != nil {
			return err
		}
		resumedState[r], err = st.fm.FullStateDict(ctx)
		return err
	})
	for r := range 2 {
		if fmt.Sprint(resumed[r]) != fmt.Sprint(full[r][2:]) {
			t.Errorf("rank %d: resumed losses %v, uninterrupted %v", r, resumed[r], full[r][2:])
		}
		if fmt.Sprint(flatState(resumedState[r])) != fmt.Sprint(flatState(fullState[r])) || len(fullState[r]) == 0 {
			t.Errorf("rank %d: resumed weights differ from the uninterrupted run's", r)
		}
	}
	var again, optAgain []Piece
	runRanks(t, 3, func(ctx context.Context, g *distributed.Group) error {
		st, err := newStepper(ctx, g, w)
		if err != nil {
			return err
		}
		defer st.fm.Close()
		if err := st.fm.LoadShardedStateDict(pieces); err != nil {
			return err
		}
		if err := st.fm.LoadOptimizerShardedState(st.opt, st.order, optPieces, meta[0]); err != nil {
			return err
		}
		op, _, err := st.fm.OptimizerShardedState(st.opt.StateDict(), st.order)
		if err != nil {
			return err
		}
		mu.Lock()
		again = append(again, st.fm.ShardedStateDict()...)
		optAgain = append(optAgain, op...)
		mu.Unlock()
		return nil
	})
	if a, b := assemble(pieces), assemble(again); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("model pieces reloaded at world 3 reassemble differently")
	}
	if a, b := assemble(optPieces), assemble(optAgain); len(a) == 0 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("optimizer pieces (%d buffers) reloaded at world 3 reassemble differently (%d buffers)", len(a), len(b))
	}
}

// flatState maps a state dict's names to its values.
func flatState(sd []nn.Named) map[string][]float32 {
	out := map[string][]float32{}
	for _, e := range sd {
		out[e.Name] = e.Tensor.Data()
	}
	return out
}

// TestBadOptions: each mistake is one line naming it, before any
// collective could hang.
func TestBadOptions(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		for _, c := range []struct {
			opts []Option
			want string
		}{
			{[]Option{Strategy(ShardingStrategy(9))}, "unknown sharding strategy 9"},
			{[]Option{MixedPrecision(MixedPrecisionPolicy{Param: tensor.Precision(7)})}, "Param precision Precision(7): want fp32 or bf16"},
			{[]Option{Strategy(HybridShard), Nodes([][]int{{0, 1}, {1}})}, "same number of ranks on every node"},
			{[]Option{Strategy(HybridShard), Nodes([][]int{{0}, {0}})}, "do not list each of ranks 0..1 once"},
			{[]Option{Strategy(HybridShard), Nodes([][]int{{0}})}, "rank 1 is on no node"},
		} {
			_, err := New(ctx, gptWorkload().build(), g, c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				return fmt.Errorf("got %v, want one line with %q", err, c.want)
			}
		}
		// Ranks giving different node layouts.
		nodes := [][]int{{0}, {1}}
		if g.Rank() == 1 {
			nodes = [][]int{{0, 1}}
		}
		_, err := New(ctx, gptWorkload().build(), g, Strategy(HybridShard), Nodes(nodes))
		if err == nil || !strings.Contains(err.Error(), "rank 0 and rank 1 give different hybrid node layouts") {
			return fmt.Errorf("different node layouts: %v", err)
		}
		fm, err := New(ctx, gptWorkload().build(), g)
		if err != nil {
			return err
		}
		defer fm.Close()
		if _, err := fm.ClipGradNorm(math.NaN()); err == nil || !strings.Contains(err.Error(), "invalid max norm NaN") {
			return fmt.Errorf("ClipGradNorm(NaN): %v", err)
		}
		return nil
	})
	for in, want := range map[string]ShardingStrategy{"FULL_SHARD": FullShard, "zero3": FullShard, "zero1": ShardOptimizer,
		"SHARD_GRAD_OP": ShardGradOp, "hybrid": HybridShard, "no_shard": NoShard} {
		if got, err := ParseStrategy(in); err != nil || got != want {
			t.Errorf("ParseStrategy(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseStrategy("zero4"); err == nil || !strings.Contains(err.Error(), `unknown sharding strategy "zero4"`) {
		t.Errorf("ParseStrategy(zero4): %v", err)
	}
}

// TestReductionsOverlapBackward: when backward reaches the embedding (the
// GPT's last gradient), the blocks' reductions are already in flight and,
// with FullShard, the blocks' full parameters and gradients already freed.
func TestReductionsOverlapBackward(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		m := gptWorkload().build().(*models.GPTModel)
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		var inflight, held int
		// Registered after the model's own hook, so it runs after it.
		remove := m.WTE.Weight.AddGradHook(func(*tensor.Pass, *tensor.Tensor) {
			inflight = len(fm.inflight)
			for _, b := range m.Blocks {
				for _, p := range nn.Parameters(b) {
					held += p.Len()
					if p.Grad() != nil {
						held += p.Grad().Len()
					}
				}
			}
		})
		defer remove()
		if _, err := trainSteps(fm, gptWorkload(), g.Rank(), 1); err != nil {
			return err
		}
		if inflight != len(fm.units) || held != 0 {
			return fmt.Errorf("at the last gradient %d of %d unit reductions were started and the blocks held %d values", inflight, len(fm.units), held)
		}
		return nil
	})
}

// TestWithoutPrefetchMatchesDDP gathers one unit at a time.
func TestWithoutPrefetchMatchesDDP(t *testing.T) {
	exactness(t, 3, gptWorkload(), 6, []ShardingStrategy{ShardGradOp, FullShard}, Prefetch(false))
}

// TestEvalForwardReleases: a forward pass without gradients (evaluation)
// gives the module's plain output and, with FullShard, frees the gathered
// parameters at once, since no backward follows.
func TestEvalForwardReleases(t *testing.T) {
	w := gptWorkload()
	ref := w.build()
	x, _ := w.input(0, 0)
	// Grad mode is process-wide: it is off for both in-process ranks
	// together.
	defer tensor.SetGradEnabled(tensor.SetGradEnabled(false))
	want := ref.Forward(x).Data()
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		m := w.build()
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		out, err := fm.ForwardErr(x)
		if err != nil {
			return err
		}
		if fmt.Sprint(out.Data()) != fmt.Sprint(want) {
			return fmt.Errorf("evaluation output differs from the unwrapped model's")
		}
		for _, p := range nn.NamedParameters(m) {
			if p.Tensor.Len() != 0 {
				return fmt.Errorf("%s still holds %d values after an evaluation forward", p.Name, p.Tensor.Len())
			}
		}
		return nil
	})
}
