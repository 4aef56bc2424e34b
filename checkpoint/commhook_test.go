package checkpoint

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// hookState is a comm hook's state: a counter and a buffer.
type hookState struct {
	iter string
	buf  []float32
	fail bool // LoadStateDict refuses
}

func (h *hookState) StateDict() optim.State {
	return optim.State{Meta: map[string]string{"iter": h.iter},
		Tensors: map[string]*tensor.Tensor{"buf": tensor.New(slices.Clone(h.buf), len(h.buf))}}
}

func (h *hookState) LoadStateDict(st optim.State) error {
	if h.fail {
		return errors.New("not my state")
	}
	b, ok := st.Tensors["buf"]
	if !ok || st.Meta["iter"] == "" {
		return errors.New("missing iter or buf")
	}
	h.iter, h.buf = st.Meta["iter"], slices.Clone(b.Data())
	return nil
}

// The comm hook's state goes into the sidecar under "commhook." names and
// comes back on load; the optimizer does not see it.
func TestTrainingCommHookState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	m := interopModel()
	opt := optim.NewAdam(nn.Parameters(m), 0.01)
	saved := &hookState{iter: "7", buf: []float32{1, -2, 3}}
	if err := SaveTraining(path, TrainingState{Model: m, Optimizer: opt, CommHook: saved}); err != nil {
		t.Fatal(err)
	}
	entries, meta, err := ReadTensorsFile(TrainingPath(path))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range entries {
		found = found || e.Name == "commhook.buf"
	}
	if !found || meta["commhook.iter"] != "7" {
		t.Fatalf("sidecar lacks commhook.buf or commhook.iter (meta %v)", meta)
	}

	got := &hookState{}
	st := TrainingState{Model: interopModel(), Optimizer: optim.NewAdam(nn.Parameters(interopModel()), 0.01), CommHook: got}
	if err := LoadTraining(path, &st); err != nil {
		t.Fatal(err)
	}
	if got.iter != "7" || !slices.Equal(got.buf, saved.buf) {
		t.Fatalf("loaded hook state %q %v, want 7 %v", got.iter, got.buf, saved.buf)
	}

	// Without a CommHook the rest loads: a resumed run may change hooks.
	st = TrainingState{Model: interopModel(), Optimizer: optim.NewAdam(nn.Parameters(interopModel()), 0.01)}
	if err := LoadTraining(path, &st); err != nil {
		t.Fatalf("loading without a CommHook: %v", err)
	}

	// A hook that refuses the state fails the load, naming it, and the
	// model is left as it was.
	model := interopModel()
	before := snapshotModel(model)
	st = TrainingState{Model: model, Optimizer: optim.NewAdam(nn.Parameters(model), 0.01), CommHook: &hookState{fail: true}}
	err = LoadTraining(path, &st)
	if err == nil || !strings.Contains(err.Error(), "comm hook state: not my state") {
		t.Fatalf("LoadTraining with a refusing hook: %v", err)
	}
	for _, e := range nn.StateDict(model) {
		if !slices.Equal(e.Tensor.Data(), before[e.Name].Data()) {
			t.Fatalf("a failed load changed %s", e.Name)
		}
	}

	// A checkpoint without hook state leaves the hook as it is.
	plain := filepath.Join(t.TempDir(), "p.safetensors")
	if err := SaveTraining(plain, TrainingState{Model: m, Optimizer: opt}); err != nil {
		t.Fatal(err)
	}
	kept := &hookState{iter: "3", buf: []float32{9}}
	st = TrainingState{Model: interopModel(), Optimizer: optim.NewAdam(nn.Parameters(interopModel()), 0.01), CommHook: kept}
	if err := LoadTraining(plain, &st); err != nil {
		t.Fatal(err)
	}
	if kept.iter != "3" || !slices.Equal(kept.buf, []float32{9}) {
		t.Fatalf("a checkpoint without hook state changed the hook: %q %v", kept.iter, kept.buf)
	}
}
