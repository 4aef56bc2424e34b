package fsdp

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// deepConfig is a GPT whose five blocks outweigh its root (embeddings and
// final norm), so that gathering per unit holds far less than the model.
var deepConfig = models.GPTConfig{VocabSize: 11, BlockSize: 8, NLayer: 5, NHead: 2, NEmbd: 16}

func buildDeep() *models.GPTModel {
	buildMu.Lock()
	defer buildMu.Unlock()
	m := models.GPT(deepConfig)
	m.ResetParameters(tensor.NewRNG(7))
	return m
}

// trainDeep runs steps AdamW steps of fm on rank's data.
func trainDeep(fm *Model, rank, steps int) error {
	const B, T = 2, 6
	opt := optim.NewAdamW(fm.Parameters(), 1e-2)
	for step := range steps {
		rng := tensor.NewRNG(uint64(100*step + rank + 1))
		var ids, targets []int
		for range B * T {
			ids = append(ids, rng.Intn(deepConfig.VocabSize))
			targets = append(targets, rng.Intn(deepConfig.VocabSize))
		}
		opt.ZeroGrad()
		out, err := fm.ForwardErr(nn.IDTensor(ids, B, T))
		if err != nil {
			return err
		}
		if err := tensor.CrossEntropyIgnore(out, targets, models.IgnoreIndex, "mean").Backward(); err != nil {
			return err
		}
		opt.Step()
	}
	return nil
}

// gatherState checks, from inside a hook, which units hold their full
// parameters: unit cur and the root do, unit prefetched (-1: none) has
// its gather in flight and no values yet, every other block holds no
// values and nothing in flight; blocks in done also hold no gradient.
func gatherState(fm *Model, m *models.GPTModel, cur, prefetched int, done func(j int) bool) error {
	inBlock := map[*tensor.Tensor]bool{}
	for j, b := range m.Blocks {
		u := fm.units[j]
		if u.mod != nn.Module(b) {
			return fmt.Errorf("unit %d is %s, not block %d", j, u.name, j)
		}
		for _, p := range nn.Parameters(b) {
			inBlock[p] = true
			switch {
			case j == cur:
				if n := numelOf(p.Shape()); p.Len() != n {
					return fmt.Errorf("block %d (running) holds %d values of a parameter %v", j, p.Len(), p.Shape())
				}
			case p.Len() != 0:
				return fmt.Errorf("block %d holds %d values of a parameter while block %d runs", j, p.Len(), cur)
			case done(j) && p.Grad() != nil:
				return fmt.Errorf("block %d still holds its full gradient while block %d runs backward", j, cur)
			}
		}
		if inflight := u.gather != nil; inflight != (j == prefetched) {
			return fmt.Errorf("while block %d runs, block %d has a gather in flight: %v (want it for block %d only)", cur, j, inflight, prefetched)
		}
	}
	for _, np := range nn.NamedParameters(m) {
		if !inBlock[np.Tensor] && np.Tensor.Len() == 0 {
			return fmt.Errorf("root parameter %s holds no values while block %d runs", np.Name, cur)
		}
	}
	return nil
}

// TestFullShardGathersPerUnit: with FullShard, while block k runs forward
// only block k and the root hold their parameters, and block k+1's gather
// is in flight; while block k runs backward, block k and the root hold
// theirs, block k-1's gather is in flight, and the blocks after k hold
// neither parameters nor gradients (reduced and freed).
func TestFullShardGathersPerUnit(t *testing.T) {
	const world, steps = 2, 2
	runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
		m := buildDeep()
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		var errs []error
		var fwd, bwd []int
		L := len(m.Blocks)
		for k, b := range m.Blocks {
			// Registered after the model's own hooks, so they run after them.
			defer nn.RegisterForwardPreHook(b, func(nn.Module, *tensor.Tensor) {
				fwd = append(fwd, k)
				next := k + 1
				if next == L {
					next = -1
				}
				if err := gatherState(fm, m, k, next, func(int) bool { return false }); err != nil {
					errs = append(errs, fmt.Errorf("forward: %w", err))
				}
			})()
			defer nn.RegisterForwardHook(b, func(_ nn.Module, _, y *tensor.Tensor) {
				y.AddBackwardPreHook(func(*tensor.Pass, *tensor.Tensor) {
					bwd = append(bwd, k)
					if err := gatherState(fm, m, k, k-1, func(j int) bool { return j > k }); err != nil {
						errs = append(errs, fmt.Errorf("backward: %w", err))
					}
				})
			})()
		}
		if err := trainDeep(fm, g.Rank(), steps); err != nil {
			return err
		}
		if len(errs) > 0 {
			return fmt.Errorf("%d checks failed, the first: %w", len(errs), errs[0])
		}
		var wantF, wantB []int
		for range steps {
			for k := range L {
				wantF, wantB = append(wantF, k), append(wantB, L-1-k)
			}
		}
		if !slices.Equal(fwd, wantF) || !slices.Equal(bwd, wantB) {
			return fmt.Errorf("blocks ran forward %v and backward %v, want %v and %v", fwd, bwd, wantF, wantB)
		}
		return nil
	})
}

// TestFullShardPeakGathered: over two training steps a FullShard rank
// never holds more gathered parameters (full values and gather buffers)
// than the root and two blocks, the bound per-unit gathering with one
// unit prefetched allows, which is well under the whole model; without
// per-unit gathering the peak would hold every unit.
func TestFullShardPeakGathered(t *testing.T) {
	const world = 2
	runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
		m := buildDeep()
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		if err := trainDeep(fm, g.Rank(), 2); err != nil {
			return err
		}
		var rootFull, rootRecv, unitFull, unitRecv, whole int64
		for _, u := range fm.units {
			var full int64
			for _, i := range u.params {
				full += 4 * int64(fm.params[i].numel)
			}
			recv := 4 * int64(world*u.block)
			whole += full
			if u.root {
				rootFull, rootRecv = full, recv
			} else {
				unitFull, unitRecv = max(unitFull, full), max(unitRecv, recv)
			}
		}
		// The root's own gather (its buffer and values, the first block's
		// prefetched), or the root with one block gathered and the next
		// one's buffer (the block's values and its own buffer at most).
		bound := max(rootFull+rootRecv+unitRecv, rootFull+unitFull+unitRecv)
		f := fm.Footprint()
		if f.PeakGathered > bound || f.PeakGathered < rootFull+unitFull {
			return fmt.Errorf("peak gathered %d bytes, want between %d (root and one block) and %d (root and two blocks); the model is %d",
				f.PeakGathered, rootFull+unitFull, bound, whole)
		}
		if bound >= whole {
			return fmt.Errorf("test model too shallow: bound %d is not below the model's %d bytes", bound, whole)
		}
		if f.Gathered != 0 {
			return fmt.Errorf("%d bytes still gathered after the step", f.Gathered)
		}
		return nil
	})
}

// twice runs the same block on its input twice.
type twice struct {
	nn.Base
	emb   *nn.LinearLayer
	block *models.GPTBlock
	head  *nn.LinearLayer
}

func newTwice() *twice {
	buildMu.Lock()
	defer buildMu.Unlock()
	nn.SetSeed(3)
	cfg := models.GPTConfig{VocabSize: 5, BlockSize: 4, NLayer: 1, NHead: 2, NEmbd: 8}
	m := &twice{emb: nn.Linear(3, 8), block: models.GPT(cfg).Blocks[0], head: nn.Linear(8, 2)}
	m.Register("emb", m.emb)
	m.Register("block", m.block)
	m.Register("head", m.head)
	return m
}

func (m *twice) Forward(x *tensor.Tensor) *tensor.Tensor {
	h := nn.Call(m.block, m.emb.Forward(x))
	return m.head.Forward(nn.Call(m.block, h))
}

// TestUnitUsedTwice: a unit run twice in one forward pass is gathered for
// each use and freed after it, gathered again for backward, and its
// gradient (both uses
// summed) is the unwrapped model's.
func TestUnitUsedTwice(t *testing.T) {
	x := tensor.Randn(tensor.NewRNG(9), 2, 4, 3)
	ref := newTwice()
	if err := tensor.Sum(ref.Forward(x), false).Backward(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{}
	for _, np := range nn.NamedParameters(ref) {
		want[np.Name] = np.Tensor.Grad().Data()
	}
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		m := newTwice()
		fm, err := New(ctx, m, g, Units(m.block, m))
		if err != nil {
			return err
		}
		defer fm.Close()
		gathers, releases := 0, 0
		defer nn.RegisterForwardPreHook(m.block, func(nn.Module, *tensor.Tensor) {
			if fm.units[0].full {
				gathers++
			}
		})()
		defer nn.RegisterForwardHook(m.block, func(nn.Module, *tensor.Tensor, *tensor.Tensor) {
			if m.block.LN1.Weight.Len() == 0 {
				releases++
			}
		})()
		out, err := fm.ForwardErr(x)
		if err != nil {
			return err
		}
		if err := tensor.Sum(out, false).Backward(); err != nil {
			return err
		}
		if gathers != 2 || releases != 2 {
			return fmt.Errorf("the block was gathered for %d and freed after %d of its 2 runs", gathers, releases)
		}
		for _, s := range fm.Parameters() {
			info, _ := fm.ShardOf(s)
			w := want[info.Name][info.Offset : info.Offset+info.Len]
			got := s.Grad().Data()[:info.Len]
			for i := range w {
				if d := got[i] - w[i]; d > 1e-5 || d < -1e-5 {
					return fmt.Errorf("%s[%d]: gradient %g, unwrapped %g", info.Name, info.Offset+i, got[i], w[i])
				}
			}
		}
		return nil
	})
}

func numelOf(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// TestFullShardForwardFreesUnits: the storage a block's parameters were
// gathered into for its forward becomes garbage once the block has run,
// while the graph that its backward needs is still alive: nothing the
// forward pass recorded holds it.
func TestFullShardForwardFreesUnits(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		m := buildDeep()
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		var tracked int
		var freed atomic.Int64
		for _, b := range m.Blocks {
			defer nn.RegisterForwardPreHook(b, func(nn.Module, *tensor.Tensor) {
				for _, p := range nn.Parameters(b) {
					if p.Len() >= 64 { // the Linear weights, the bulk of a block
						tracked++
						runtime.AddCleanup(&p.Data()[0], func(*atomic.Int64) { freed.Add(1) }, &freed)
					}
				}
			})()
		}
		const B, T = 2, 6
		ids := make([]int, B*T)
		for i := range ids {
			ids[i] = (i*7 + g.Rank()) % deepConfig.VocabSize
		}
		out, err := fm.ForwardErr(nn.IDTensor(ids, B, T))
		if err != nil {
			return err
		}
		loss := tensor.CrossEntropyIgnore(out, ids, models.IgnoreIndex, "mean")
		if !testproc.Poll(30*time.Second, func() bool { runtime.GC(); return freed.Load() == int64(tracked) }) {
			return fmt.Errorf("after forward, %d of the %d gathered block weights were freed", freed.Load(), tracked)
		}
		if tracked != 4*len(m.Blocks) {
			return fmt.Errorf("tracked %d weights, want 4 per block", tracked)
		}
		return loss.Backward()
	})
}

// direct runs its block by calling Forward, not through nn.Call.
type direct struct{ twice }

func (m *direct) Forward(x *tensor.Tensor) *tensor.Tensor {
	return m.head.Forward(m.block.Forward(m.emb.Forward(x)))
}

// TestUnitNotCalledThroughCall: a unit whose module is not run through
// nn.Call has no values when it runs; the panic says which unit and why.
func TestUnitNotCalledThroughCall(t *testing.T) {
	x := tensor.Randn(tensor.NewRNG(9), 2, 4, 3)
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) (err error) {
		m := &direct{*newTwice()}
		fm, err := New(ctx, m, g, Units(m.block, m))
		if err != nil {
			return err
		}
		defer fm.Close()
		defer func() {
			msg := fmt.Sprint(recover())
			if !strings.Contains(msg, "units block had not been gathered") || !strings.Contains(msg, "nn.Call") {
				err = fmt.Errorf("panic %q does not explain the unit run outside nn.Call", msg)
			}
		}()
		_, err = fm.ForwardErr(x)
		return fmt.Errorf("forward did not panic (error %v)", err)
	})
}
