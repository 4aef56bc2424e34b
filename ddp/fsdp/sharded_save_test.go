package fsdp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// TestFullParamsOn: at world 3 under FullShard, FullParamsOn visits on
// rank 1 alone every parameter once, with FullStateDictOn's values;
// while a block's parameter is visited no other block holds values, and
// what is gathered at once stays within one unit (its values and its
// receive buffer), well below the whole model; afterwards nothing is
// left gathered. A visit's error is rank 1's result, the gathers still
// complete on every rank (the next collective works), and a rank outside
// the group is one error naming it.
func TestFullParamsOn(t *testing.T) {
	runRanks(t, 3, func(ctx context.Context, g *distributed.Group) error {
		m := buildDeep()
		fm, err := New(ctx, m, g)
		if err != nil {
			return err
		}
		defer fm.Close()
		if err := trainDeep(fm, g.Rank(), 2); err != nil {
			return err
		}
		want, err := fm.FullStateDictOn(ctx, 1)
		if err != nil {
			return err
		}
		blockOf := map[*tensor.Tensor]int{}
		for _, p := range nn.Parameters(m) {
			blockOf[p] = -1
		}
		for b, blk := range m.Blocks {
			for _, p := range nn.Parameters(blk) {
				blockOf[p] = b
			}
		}
		fm.ResetPeak()
		got := map[string][]float32{}
		var wrong []string
		err = fm.FullParamsOn(ctx, 1, func(name string, p *tensor.Tensor) error {
			if g.Rank() != 1 {
				wrong = append(wrong, "visited on rank "+fmt.Sprint(g.Rank()))
			}
			if _, dup := got[name]; dup {
				wrong = append(wrong, name+" visited twice")
			}
			got[name] = slices.Clone(p.Data())
			for q, b := range blockOf {
				if b >= 0 && b != blockOf[p] && q.Len() != 0 {
					wrong = append(wrong, fmt.Sprintf("block %d holds values while %s is visited", b, name))
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(wrong) > 0 {
			return errors.New(wrong[0])
		}
		peak := fm.Footprint().PeakGathered
		if g.Rank() == 1 {
			wantByName := flatState(want)
			for _, np := range nn.NamedParameters(m) {
				w, ok := wantByName[np.Name]
				if !ok {
					return fmt.Errorf("%s: not in FullStateDictOn's result", np.Name)
				}
				if !slices.Equal(got[np.Name], w) {
					return fmt.Errorf("%s: visited values differ from FullStateDictOn's", np.Name)
				}
			}
			if len(got) != len(nn.NamedParameters(m)) {
				return fmt.Errorf("visited %d parameters, the model has %d", len(got), len(nn.NamedParameters(m)))
			}
		} else if len(got) != 0 {
			return fmt.Errorf("rank %d visited %d parameters", g.Rank(), len(got))
		}
		for _, p := range nn.NamedParameters(m) {
			if p.Tensor.Len() != 0 {
				return fmt.Errorf("%s holds %d values after FullParamsOn", p.Name, p.Tensor.Len())
			}
		}
		var whole, unit int64
		for _, u := range fm.units {
			n := int64(0)
			for _, i := range u.params {
				n += 4 * int64(fm.params[i].numel)
			}
			whole += n
			unit = max(unit, n+4*int64(fm.ns*u.block))
		}
		if unit >= whole {
			return fmt.Errorf("the test's model is too shallow: a unit and its buffer are %d bytes, the model %d", unit, whole)
		}
		if peak > unit {
			return fmt.Errorf("FullParamsOn held %d bytes gathered at once; a unit with its buffer is at most %d, the model %d", peak, unit, whole)
		}

		stop := errors.New("disk full")
		visits := 0
		err = fm.FullParamsOn(ctx, 1, func(string, *tensor.Tensor) error { visits++; return stop })
		if g.Rank() == 1 && (!errors.Is(err, stop) || visits != 1) || g.Rank() != 1 && err != nil {
			return fmt.Errorf("a failing visit: FullParamsOn = %v after %d visits", err, visits)
		}
		if _, err := fm.FullStateDictOn(ctx, 0); err != nil {
			return fmt.Errorf("after a failing visit: %w", err)
		}
		if err := fm.FullParamsOn(ctx, 3, nil); err == nil || !strings.Contains(err.Error(), "rank 3 outside the group of 3") {
			return fmt.Errorf("FullParamsOn(3) = %v, want an error naming rank 3", err)
		}
		return nil
	})
}
