package fsdp

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// TestEvaluateSharded: after two training steps of a five-block GPT,
// forward passes of the module itself (and one through m.Forward) inside
// Evaluate give, on every rank, exactly the outputs of an unsharded model
// holding the trained weights (FullStateDict's), pass after pass. Under FullShard and HybridShard no rank's module holds
// the whole model meanwhile: when each block runs, the parameters of
// every other block hold no values, and what is gathered at once stays
// within the root and two blocks; afterwards nothing is left gathered.
// Under ShardGradOp the module's parameters are refreshed from the
// shards the optimizer updated, so the outputs are the trained model's
// too.
func TestEvaluateSharded(t *testing.T) {
	for _, tc := range []struct {
		s     ShardingStrategy
		world int
		opts  []Option
	}{
		{FullShard, 3, nil},
		{ShardGradOp, 3, nil},
		{HybridShard, 4, []Option{Nodes([][]int{{0, 1}, {2, 3}})}},
	} {
		t.Run(tc.s.String(), func(t *testing.T) {
			defer tensor.SetGradEnabled(tensor.SetGradEnabled(true))
			runRanks(t, tc.world, func(ctx context.Context, g *distributed.Group) error {
				return evaluateSharded(ctx, g, tc.s, tc.opts)
			})
		})
	}
}

func evaluateSharded(ctx context.Context, g *distributed.Group, s ShardingStrategy, opts []Option) error {
	m := buildDeep()
	fm, err := New(ctx, m, g, append([]Option{Strategy(s)}, opts...)...)
	if err != nil {
		return err
	}
	defer fm.Close()
	if err := trainDeep(fm, g.Rank(), 2); err != nil {
		return err
	}
	// Grad mode is process-wide: rank 0 turns it off for every
	// in-process rank between barriers.
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		tensor.SetGradEnabled(false)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	defer func() {
		if g.Barrier(ctx) == nil && g.Rank() == 0 {
			tensor.SetGradEnabled(true)
		}
	}()
	var inputs []*tensor.Tensor
	for pass := range 3 {
		rng := tensor.NewRNG(uint64(1000 + pass)) // the same on every rank
		ids := make([]int, 2*6)
		for i := range ids {
			ids[i] = rng.Intn(deepConfig.VocabSize)
		}
		x := nn.IDTensor(ids, 2, 6)
		inputs = append(inputs, x)
	}

	// blockOf[p] is the block p belongs to, -1 for the root's.
	blockOf := map[*tensor.Tensor]int{}
	for _, p := range nn.Parameters(m) {
		blockOf[p] = -1
	}
	for b, blk := range m.Blocks {
		for _, p := range nn.Parameters(blk) {
			blockOf[p] = b
		}
	}
	var seen []string
	for b, blk := range m.Blocks {
		remove := nn.RegisterForwardPreHook(blk, func(nn.Module, *tensor.Tensor) {
			for p, pb := range blockOf {
				if pb >= 0 && pb != b && p.Len() != 0 && fm.releases() {
					seen = append(seen, fmt.Sprintf("block %d holds %d values while block %d runs", pb, p.Len(), b))
				}
				if (pb == b || pb < 0) && p.Len() == 0 {
					seen = append(seen, fmt.Sprintf("a parameter of block %d has no values while block %d runs", pb, b))
				}
			}
		})
		defer remove()
	}
	fm.ResetPeak()
	var got [][]float32
	err = fm.Evaluate(ctx, func() error {
		for pass, x := range inputs {
			if pass == 1 { // through the wrapper: the same gathering
				got = append(got, slices.Clone(fm.Forward(x).Data()))
				continue
			}
			got = append(got, slices.Clone(m.Forward(x).Data()))
		}
		return nil
	})
	if err != nil {
		return err
	}
	peak := fm.Footprint().PeakGathered
	// The trained weights, gathered after Evaluate: FullStateDict
	// refreshes what ShardGradOp's module holds.
	trained, err := fm.FullStateDict(ctx)
	if err != nil {
		return err
	}
	ref := buildDeep()
	sd := map[string]*tensor.Tensor{}
	for _, e := range trained {
		sd[e.Name] = e.Tensor
	}
	if err := nn.LoadStateDict(ref, sd, true); err != nil {
		return err
	}
	var want [][]float32
	for _, x := range inputs {
		want = append(want, ref.Forward(x).Data())
	}
	if len(seen) > 0 {
		return fmt.Errorf("%s: %s", s, seen[0])
	}
	for pass := range want {
		if !slices.Equal(got[pass], want[pass]) {
			return fmt.Errorf("%s: pass %d: the sharded model's output differs from the trained model's", s, pass)
		}
	}
	if !fm.releases() {
		return nil
	}
	for _, p := range nn.NamedParameters(m) {
		if p.Tensor.Len() != 0 {
			return fmt.Errorf("%s: %s holds %d values after Evaluate", s, p.Name, p.Tensor.Len())
		}
	}
	var root, whole, block, recv int64
	for _, u := range fm.units {
		n := int64(0)
		for _, i := range u.params {
			n += 4 * int64(fm.params[i].numel)
		}
		whole += n
		if u.root {
			root = n
		} else {
			block, recv = max(block, n), max(recv, 4*int64(fm.ns*u.block))
		}
	}
	// The root's values, and a block's values and receive buffer while
	// the next block's gather is in flight.
	bound := root + block + 2*recv
	if bound >= whole {
		return fmt.Errorf("the test's model is too shallow: %d bytes bound, the model is %d", bound, whole)
	}
	if peak > bound {
		return fmt.Errorf("%s: Evaluate held %d bytes gathered at once (the whole model is %d); the root is %d, a block %d", s, peak, whole, root, block)
	}
	return nil
}
