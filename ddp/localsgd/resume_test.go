package localsgd

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// resumeModel is a two-layer model whose four parameters make two
// fragments, initialised from seed.
func resumeModel(seed uint64) nn.Module {
	m := nn.Sequential(nn.Linear(lIn, 4), nn.Linear(4, lOut))
	rng := tensor.NewRNG(seed)
	for _, p := range nn.Parameters(m) {
		rng.FillUniform(p, -0.5, 0.5)
	}
	return m
}

// TestResumeBitIdentical trains streaming DiLoCo (two fragments, bf16
// outer gradients, a delay of one step, AdamW inside) for 12 steps at
// world 2, and again for 6 steps, checkpointed through
// checkpoint.SaveTraining with the Model as TrainingState.CommHook — a
// reduction in flight at that step, the ranks' replicas and AdamW
// moments different — then resumed with checkpoint.ResumeFrom into
// freshly built models and optimizers and trained to step 12. Every
// rank's parameters, θ_global and outer momentum must equal the
// uninterrupted run's bit for bit.
func TestResumeBitIdentical(t *testing.T) {
	const world, h, steps, stop = 2, 4, 12, 6
	path := filepath.Join(t.TempDir(), "model.safetensors")
	type final struct{ params, global, outer []float32 }
	build := func(ctx context.Context, g *distributed.Group, seed uint64) (nn.Module, *Model, optim.Optimizer, error) {
		model := resumeModel(seed)
		opt := optim.NewAdamW(nn.Parameters(model), 0.01)
		m, err := NewDiLoCo(ctx, model, g, h, Fragments(2), BF16(true), Delay(1), Alpha(0.25), InnerOptimizer(opt))
		return model, m, opt, err
	}
	train := func(ctx context.Context, model nn.Module, m *Model, opt optim.Optimizer, rank int, to int64) error {
		for m.Step() < to {
			trainStep(model, opt, int(m.Step())+1, rank)
			if err := m.AfterStep(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	finalOf := func(model nn.Module, m *Model) final {
		f := final{params: flatParams(model)}
		for _, g := range m.globals {
			f.global = append(f.global, g.Data()...)
		}
		st := m.outer.StateDict()
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range st.Tensors {
				if !yield(k) {
					return
				}
			}
		}) {
			f.outer = append(f.outer, st.Tensors[k].Data()...)
		}
		return f
	}
	whole := make([]final, world)
	runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
		model, m, opt, err := build(ctx, g, 1)
		if err != nil {
			return err
		}
		defer m.Close()
		if err := train(ctx, model, m, opt, g.Rank(), steps); err != nil {
			return err
		}
		whole[g.Rank()] = finalOf(model, m)
		return nil
	})
	resumed := make([]final, world)
	runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
		model, m, opt, err := build(ctx, g, 1)
		if err != nil {
			return err
		}
		if err := train(ctx, model, m, opt, g.Rank(), stop); err != nil {
			return err
		}
		if m.frags[0].pending == nil {
			return fmt.Errorf("no reduction in flight at step %d: the test no longer checkpoints one", stop)
		}
		if err := m.GatherState(ctx, g); err != nil {
			return err
		}
		if g.Rank() == 0 {
			st := checkpoint.TrainingState{Model: model, Optimizer: opt, Step: m.Step(), CommHook: m}
			if err := checkpoint.SaveTraining(path, st); err != nil {
				return err
			}
		}
		if err := m.Close(); err != nil {
			return err
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		// A new process: other weights, fresh optimizers, step 0.
		model, m, opt, err = build(ctx, g, 2)
		if err != nil {
			return err
		}
		defer m.Close()
		st := checkpoint.TrainingState{Model: model, Optimizer: opt, CommHook: m}
		found, err := checkpoint.ResumeFrom(ctx, g, path, &st)
		if err != nil || !found {
			return fmt.Errorf("resuming: found %v, %v", found, err)
		}
		if m.Step() != stop || st.Step != stop {
			return fmt.Errorf("resumed at step %d (checkpoint's %d), want %d", m.Step(), st.Step, stop)
		}
		if err := train(ctx, model, m, opt, g.Rank(), steps); err != nil {
			return err
		}
		resumed[g.Rank()] = finalOf(model, m)
		return nil
	})
	if slices.Equal(whole[0].params, whole[1].params) {
		t.Fatal("the ranks' replicas are equal at the end: the test does not check that each resumes its own")
	}
	for r := range world {
		for _, c := range []struct {
			name      string
			got, want []float32
		}{{"parameters", resumed[r].params, whole[r].params}, {"θ_global", resumed[r].global, whole[r].global}, {"outer state", resumed[r].outer, whole[r].outer}} {
			if len(c.want) == 0 || !slices.Equal(c.got, c.want) {
				t.Errorf("rank %d: resumed %s differ from the uninterrupted run's:\n got  %v\n want %v", r, c.name, c.got, c.want)
			}
		}
	}
}

// TestLoadStateDictRefusesOtherSchedule: a state of another mode,
// h or fragment count is an error naming it, and leaves the
// Model as it was.
func TestLoadStateDictRefusesOtherSchedule(t *testing.T) {
	ctx := context.Background()
	src, err := NewDiLoCo(ctx, resumeModel(1), soloGroup{}, 4, Fragments(2))
	if err != nil {
		t.Fatal(err)
	}
	st := src.StateDict()
	for _, c := range []struct {
		name string
		make func() (*Model, error)
		want string
	}{
		{"fragments", func() (*Model, error) { return NewDiLoCo(ctx, resumeModel(1), soloGroup{}, 4) }, "fragments is \"2\", this run's \"1\""},
		{"sync_every", func() (*Model, error) { return NewDiLoCo(ctx, resumeModel(1), soloGroup{}, 6, Fragments(2)) }, "sync_every is \"4\", this run's \"6\""},
		{"mode", func() (*Model, error) { return NewLocalSGD(ctx, resumeModel(1), soloGroup{}, 4, Fragments(2)) }, "mode is \"diloco\", this run's \"localsgd\""},
	} {
		m, err := c.make()
		if err != nil {
			t.Fatal(err)
		}
		err = m.LoadStateDict(st)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: LoadStateDict error %v, want one naming %s", c.name, err, c.want)
		}
	}
	bad := src.StateDict()
	delete(bad.Tensors, "global.3")
	m, _ := NewDiLoCo(ctx, resumeModel(1), soloGroup{}, 4, Fragments(2))
	m.step = 7
	if err := m.LoadStateDict(bad); err == nil || !strings.Contains(err.Error(), "global.3 is missing") {
		t.Errorf("LoadStateDict without global.3: %v, want an error naming it", err)
	}
	if m.step != 7 {
		t.Errorf("a failed LoadStateDict changed the step to %d", m.step)
	}
}
