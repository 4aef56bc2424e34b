package localsgd

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
)

// TestOuterStepMatchesPyTorch replays testdata/diloco_outer.json
// (written by diloco_outer.py with torch.optim.SGD(lr=0.7, momentum=0.9,
// nesterov=True)): for three rounds each of two ranks sets its replica
// to the fixture's parameters after its inner steps and syncs (H=1);
// θ_global must follow PyTorch's outer optimizer to float32 rounding.
func TestOuterStepMatchesPyTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/diloco_outer.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Init    []float32
		Locals  [][][]float32 // [round][rank]
		Globals [][]float64   // [round]
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	got := make([][]float32, len(fx.Globals))
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		model := nn.Linear(3, 2)
		copy(model.Weight.Data(), fx.Init[:6])
		copy(model.Bias.Data(), fx.Init[6:])
		m, err := NewDiLoCo(ctx, model, g, 1)
		if err != nil {
			return err
		}
		defer m.Close()
		for round, locals := range fx.Locals {
			mine := locals[g.Rank()]
			copy(model.Weight.Data(), mine[:6])
			copy(model.Bias.Data(), mine[6:])
			if err := m.AfterStep(ctx); err != nil {
				return err
			}
			if g.Rank() == 0 {
				got[round] = flatParams(model)
			}
		}
		return nil
	})
	for round, want := range fx.Globals {
		if msg := closeTo(got[round], want, 1e-6); msg != "" {
			t.Errorf("round %d: θ_global %s", round+1, msg)
		}
	}
}
