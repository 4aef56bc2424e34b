package fsdp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
)

// TestFullStateDictOn: at world 3 under FullShard, rank 1 alone receives
// the consolidated state dict, the same as FullStateDict's; the others
// get nil; the module's parameters are released again; consolidating
// gathers one unit at a time (PeakGathered stays within two of the
// largest unit's full parameters: its receive buffer and its values);
// and a rank outside the group is one error naming it.
func TestFullStateDictOn(t *testing.T) {
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
		want, err := fm.FullStateDict(ctx)
		if err != nil {
			return err
		}
		fm.ResetPeak()
		got, err := fm.FullStateDictOn(ctx, 1)
		if err != nil {
			return err
		}
		if g.Rank() != 1 {
			if got != nil {
				return fmt.Errorf("rank %d received %d entries, want none", g.Rank(), len(got))
			}
		} else {
			ws, gs := flatState(want), flatState(got)
			if len(ws) != len(gs) || len(gs) != len(nn.StateDict(models.GPT(gptConfig))) {
				return fmt.Errorf("%d entries, FullStateDict %d", len(gs), len(ws))
			}
			for k, w := range ws {
				for i := range w {
					if gs[k][i] != w[i] {
						return fmt.Errorf("%s[%d] = %g, FullStateDict %g", k, i, gs[k][i], w[i])
					}
				}
			}
		}
		for _, p := range nn.NamedParameters(m) {
			if p.Tensor.Len() != 0 {
				return fmt.Errorf("%s holds %d values after consolidating", p.Name, p.Tensor.Len())
			}
		}
		largest := int64(0)
		for _, u := range fm.units {
			n := int64(0)
			for _, i := range u.params {
				n += 4 * int64(fm.params[i].numel)
			}
			largest = max(largest, n)
		}
		if peak := fm.Footprint().PeakGathered; peak > 2*largest+4*3*int64(len(fm.params)) {
			return fmt.Errorf("consolidating held %d bytes gathered at once, the largest unit is %d", peak, largest)
		}
		if _, err := fm.FullStateDictOn(ctx, 3); err == nil || !strings.Contains(err.Error(), "rank 3 outside the group of 3") {
			return fmt.Errorf("FullStateDictOn(3) = %v, want an error naming rank 3", err)
		}
		return nil
	})
}
