package localsgd

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/optim"
)

// A sync run by hand (Advance, then Reduce, Discard, Reduce again and
// Apply) leaves every rank bit for bit where AfterStep does, so that a
// membership layer may drop a reduction and redo it.
func TestReduceDiscardApplyMatchesAfterStep(t *testing.T) {
	for _, mode := range []string{"localsgd", "diloco", "diloco-bf16"} {
		t.Run(mode, func(t *testing.T) {
			runRanks(t, 3, func(ctx context.Context, g *distributed.Group) error {
				newModel := func() (*Model, optim.Optimizer, error) {
					l := newLinear()
					var m *Model
					var err error
					switch mode {
					case "localsgd":
						m, err = NewLocalSGD(ctx, l, g, 3)
					case "diloco":
						m, err = NewDiLoCo(ctx, l, g, 3)
					default:
						m, err = NewDiLoCo(ctx, l, g, 3, BF16(true))
					}
					return m, optim.NewSGD(m.Parameters(), 0.1), err
				}
				auto, autoOpt, err := newModel()
				if err != nil {
					return err
				}
				manual, manualOpt, err := newModel()
				if err != nil {
					return err
				}
				for s := 1; s <= 7; s++ {
					trainStep(auto, autoOpt, s, g.Rank())
					if err := auto.AfterStep(ctx); err != nil {
						return err
					}
					trainStep(manual, manualOpt, s, g.Rank())
					if due := manual.Advance(); due != (s%3 == 0) {
						return fmt.Errorf("step %d: Advance says due=%v", s, due)
					}
					if !manual.Due() {
						continue
					}
					if err := manual.Reduce(ctx, false, true); err != nil {
						return err
					}
					manual.Discard()
					if got, want := flatParams(manual.Module()), flatParams(auto.Module()); slices.Equal(got, want) {
						return fmt.Errorf("step %d: Reduce or Discard changed the replica", s)
					}
					if err := manual.Reduce(ctx, false, true); err != nil {
						return err
					}
					manual.Apply()
				}
				if got, want := flatParams(manual.Module()), flatParams(auto.Module()); !slices.Equal(got, want) {
					return fmt.Errorf("after 7 steps: by hand %v, AfterStep %v", got, want)
				}
				return nil
			})
		})
	}
}

// A replica that does not contribute sends zeros and is not counted: the
// outer step is the one of the replicas that contributed (the float64
// reference of ranks 0 and 1 alone), and every rank, the silent one
// too, ends with the same parameters.
func TestReduceWithoutAContributor(t *testing.T) {
	for _, mode := range []string{"localsgd", "diloco"} {
		t.Run(mode, func(t *testing.T) {
			const h = 2
			ref := newRef(mode, 2, h, [][2]int{{0, lIn*lOut + lOut}})
			for s := 1; s <= h; s++ {
				ref.step(s)
			}
			finals := make([][]float32, 3)
			runRanks(t, 3, func(ctx context.Context, g *distributed.Group) error {
				l := newLinear()
				var m *Model
				var err error
				if mode == "diloco" {
					m, err = NewDiLoCo(ctx, l, g, h)
				} else {
					m, err = NewLocalSGD(ctx, l, g, h)
				}
				if err != nil {
					return err
				}
				opt := optim.NewSGD(m.Parameters(), 0.1)
				for s := 1; s <= h; s++ {
					trainStep(m, opt, s, g.Rank())
					m.Advance()
				}
				if err := m.Reduce(ctx, false, g.Rank() != 2); err != nil {
					return err
				}
				if m.Contributors() != 2 {
					return fmt.Errorf("%d contributors, want 2", m.Contributors())
				}
				m.Apply()
				finals[g.Rank()] = flatParams(l)
				return nil
			})
			if msg := closeTo(finals[0], ref.theta[0], 1e-5); msg != "" {
				t.Fatalf("rank 0 after the sync without rank 2: %s", msg)
			}
			for r := 1; r < 3; r++ {
				if !slices.Equal(finals[r], finals[0]) {
					t.Fatalf("rank %d holds %v after the sync, rank 0 %v", r, finals[r], finals[0])
				}
			}
		})
	}
}

// Reduce refuses a Model whose reductions overlap inner steps.
func TestReduceRefusesDelay(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		m, err := NewDiLoCo(ctx, newLinear(), g, 4, Delay(1))
		if err != nil {
			return err
		}
		if err := m.Reduce(ctx, false, true); err != errDelayed {
			return fmt.Errorf("Reduce with Delay 1: %v, want %v", err, errDelayed)
		}
		return nil
	})
}
