package checkpoint

import (
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// trainedModel returns interopModel with distinct values everywhere,
// including BatchNorm's running statistics and counter.
func trainedModel(seed float32) nn.Module {
	m := interopModel()
	for k, e := range nn.StateDict(m) {
		d := e.Tensor.Data()
		for i := range d {
			d[i] = seed*float32(k+1) + float32(i)/100
			if e.Dtype == nn.Int64 {
				d[i] = float32(k)
			}
		}
	}
	return m
}

func sameState(t *testing.T, a, b nn.Module) {
	t.Helper()
	sa, sb := nn.StateDict(a), nn.StateDict(b)
	if len(sa) != len(sb) {
		t.Fatalf("%d vs %d entries", len(sa), len(sb))
	}
	for i := range sa {
		if sa[i].Name != sb[i].Name || !slices.Equal(sa[i].Tensor.Data(), sb[i].Tensor.Data()) {
			t.Fatalf("entry %s differs", sa[i].Name)
		}
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	src := trainedModel(0.5)
	if err := Save(path, src); err != nil {
		t.Fatal(err)
	}
	dst := interopModel()
	if err := Load(path, dst); err != nil {
		t.Fatal(err)
	}
	sameState(t, src, dst)

	entries, meta, err := ReadTensorsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "pt" {
		t.Errorf("metadata %v, want format=pt", meta)
	}
	for _, e := range entries {
		if want := map[bool]DType{true: I64, false: F32}[e.Name == "2.num_batches_tracked"]; e.DType != want {
			t.Errorf("%s stored as %s, want %s", e.Name, e.DType, want)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, err %v; want 0644", fi.Mode(), err)
	}
	if leftovers := dirNames(t, filepath.Dir(path)); !slices.Equal(leftovers, []string{"model.safetensors"}) {
		t.Errorf("directory holds %v", leftovers)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestWriteFileAtomicFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk on fire")
	err := WriteFileAtomic(path, func(w io.Writer) error {
		// Write more than the buffer so part of it reaches the temp file.
		if _, err := w.Write(make([]byte, 3<<20)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want the writer's error naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("path now holds %d bytes, want the old file", len(b))
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"model.safetensors"}) {
		t.Fatalf("temporary file left behind: %v", names)
	}
	if err := Save(filepath.Join(dir, "no", "such", "dir", "m.safetensors"), trainedModel(1)); err == nil || !strings.Contains(err.Error(), "no/such/dir") {
		t.Fatalf("Save into a missing directory: err = %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	if err := Save(good, trainedModel(1)); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notObject := slices.Clone(raw)
	copy(notObject[8:], "[")
	corruptHeader := []byte(strings.Replace(string(raw), `"shape":`, `"shape";`, 1))
	badLen := slices.Clone(raw)
	binary.LittleEndian.PutUint64(badLen, uint64(len(raw)))
	badDType := []byte(strings.Replace(string(raw), `"dtype":"F32"`, `"dtype":"X32"`, 1))

	for _, c := range []struct {
		name, path string
		is         error
		want       string
	}{
		{"missing", filepath.Join(dir, "absent.safetensors"), fs.ErrNotExist, "absent.safetensors"},
		{"truncated", write("trunc.safetensors", raw[:len(raw)-10]), ErrCorrupt, "out of range"},
		{"header only", write("short.safetensors", raw[:5]), ErrCorrupt, "shorter than the 8-byte header length"},
		{"corrupt header", write("hdr.safetensors", corruptHeader), ErrCorrupt, "header is not valid JSON"},
		{"header not an object", write("obj.safetensors", notObject), ErrCorrupt, "header is not a JSON object"},
		{"header length", write("len.safetensors", badLen), ErrCorrupt, "exceeds the"},
		{"bad dtype", write("dtype.safetensors", badDType), ErrCorrupt, `unknown dtype "X32"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := trainedModel(2)
			err := Load(c.path, m)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %v naming %s and containing %q", err, c.is, c.path, c.want)
			}
			sameState(t, m, trainedModel(2))
		})
	}
}

func TestLoadStateDictMismatch(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, entries []Entry) string {
		p := filepath.Join(dir, name)
		if err := WriteFileAtomic(p, func(w io.Writer) error { return WriteTensors(w, entries, nil) }); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := modelEntries(trainedModel(1))
	var missing, unexpected, misshaped []Entry
	for _, e := range base {
		if e.Name != "4.bias" {
			missing = append(missing, e)
		}
		if e.Name == "1.weight" {
			misshaped = append(misshaped, Entry{Name: e.Name, Tensor: tensor.Zeros(16, 63)})
		} else {
			misshaped = append(misshaped, e)
		}
	}
	unexpected = append(slices.Clone(base), Entry{Name: "9.weight", Tensor: tensor.Zeros(2)})

	for _, c := range []struct {
		name, path string
		want       string
	}{
		{"missing", write("missing.safetensors", missing), "1 missing key [4.bias]"},
		{"unexpected", write("unexpected.safetensors", unexpected), "1 unexpected key [9.weight]"},
		{"mis-shaped", write("shape.safetensors", misshaped), "1 shape mismatch: 1.weight: have [16 64], got [16 63]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := trainedModel(3)
			err := Load(c.path, m)
			var serr *nn.StateDictError
			if !errors.As(err, &serr) || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a *nn.StateDictError naming %s and containing %q", err, c.path, c.want)
			}
			sameState(t, m, trainedModel(3))
		})
	}
}

// trainSteps runs steps of full-batch regression on fixed data.
func trainSteps(t *testing.T, m nn.Module, opt optim.Optimizer, sched optim.Scheduler, steps int) {
	t.Helper()
	x := tensor.Zeros(8, 1, 8, 8)
	y := tensor.Zeros(8, 10)
	for i := range x.Data() {
		x.Data()[i] = float32((i*37)%17)/17 - 0.5
	}
	for i := range y.Data() {
		y.Data()[i] = float32((i*11)%7) / 7
	}
	nn.SetTrain(m, true)
	for s := 0; s < steps; s++ {
		opt.ZeroGrad()
		if err := nn.MSE(m.Forward(x), y).Backward(); err != nil {
			t.Fatal(err)
		}
		opt.Step()
		if sched != nil {
			sched.Step()
		}
	}
}

type extras struct {
	SamplerEpoch int     `json:"sampler_epoch"`
	BestAcc      float64 `json:"best_acc"`
}

func TestTrainingResumeMatchesUninterrupted(t *testing.T) {
	const k, more = 3, 4
	path := filepath.Join(t.TempDir(), "run.safetensors")

	straight := trainedModel(0.01)
	opt := optim.NewAdam(nn.Parameters(straight), 0.01)
	sched := optim.NewStepLR(opt, 2, 0.5)
	trainSteps(t, straight, opt, sched, k+more)

	first := trainedModel(0.01)
	opt1 := optim.NewAdam(nn.Parameters(first), 0.01)
	sched1 := optim.NewStepLR(opt1, 2, 0.5)
	trainSteps(t, first, opt1, sched1, k)
	err := SaveTraining(path, TrainingState{Model: first, Optimizer: opt1, Scheduler: sched1,
		Epoch: 1, Step: k, Extra: extras{SamplerEpoch: 1, BestAcc: 0.75}})
	if err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, filepath.Dir(path)); !slices.Equal(names, []string{"run.safetensors", "run.train.safetensors"}) {
		t.Fatalf("files %v", names)
	}

	resumed := trainedModel(7) // different weights: the checkpoint must overwrite them
	opt2 := optim.NewAdam(nn.Parameters(resumed), 0.5)
	sched2 := optim.NewStepLR(opt2, 9, 0.1)
	var ex extras
	st := TrainingState{Model: resumed, Optimizer: opt2, Scheduler: sched2, Extra: &ex}
	if err := LoadTraining(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Epoch != 1 || st.Step != k || ex != (extras{1, 0.75}) {
		t.Fatalf("counters epoch %d step %d extra %+v", st.Epoch, st.Step, ex)
	}
	trainSteps(t, resumed, opt2, sched2, more)
	sameState(t, straight, resumed)
	if opt.LR() != opt2.LR() {
		t.Fatalf("lr %v after resume, %v uninterrupted", opt2.LR(), opt.LR())
	}

	// Extra that cannot take the saved value: an error, nothing changed.
	wrong := []int{1}
	st = TrainingState{Model: interopModel(), Optimizer: optim.NewAdam(nn.Parameters(interopModel()), 0.5), Scheduler: optim.NewStepLR(opt2, 9, 0.1), Extra: &wrong}
	if err := LoadTraining(path, &st); err == nil || !strings.Contains(err.Error(), "decoding extra into *[]int") || wrong[0] != 1 {
		t.Fatalf("wrong Extra type: err = %v, value %v", err, wrong)
	}
	st.Extra = extras{}
	if err := LoadTraining(path, &st); err == nil || !strings.Contains(err.Error(), "need a non-nil pointer") {
		t.Fatalf("non-pointer Extra: err = %v", err)
	}

	// The model file alone is a plain model checkpoint.
	plain := interopModel()
	if err := Load(path, plain); err != nil {
		t.Fatal(err)
	}
}

func TestLoadTrainingErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	newState := func(withSched bool) TrainingState {
		m := trainedModel(1)
		opt := optim.NewSGD(nn.Parameters(m), 0.1, optim.Momentum(0.9))
		st := TrainingState{Model: m, Optimizer: opt}
		if withSched {
			st.Scheduler = optim.NewCosineAnnealingLR(opt, 10, 0)
		}
		return st
	}
	if err := LoadTraining(path, &TrainingState{}); err == nil || !strings.Contains(err.Error(), "required") {
		t.Fatalf("empty state: err = %v", err)
	}
	st := newState(true)
	if err := LoadTraining(path, &st); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "ckpt.train.safetensors") {
		t.Fatalf("nothing saved yet: err = %v", err)
	}
	save := newState(true)
	trainSteps(t, save.Model, save.Optimizer, save.Scheduler, 1)
	if err := SaveTraining(path, save); err != nil {
		t.Fatal(err)
	}

	st = newState(false)
	if err := LoadTraining(path, &st); err == nil || !strings.Contains(err.Error(), "holds scheduler state (CosineAnnealingLR) but no Scheduler") {
		t.Fatalf("scheduler not given: err = %v", err)
	}
	st = newState(true)
	st.Optimizer = optim.NewAdam(nn.Parameters(st.Model), 0.1)
	st.Scheduler = optim.NewCosineAnnealingLR(st.Optimizer, 10, 0)
	if err := LoadTraining(path, &st); !errors.Is(err, optim.ErrStateDict) || !strings.Contains(err.Error(), `state is for optimizer "SGD"`) {
		t.Fatalf("wrong optimizer: err = %v", err)
	}
	sameState(t, st.Model, trainedModel(1)) // the model was loaded, then restored

	// A scheduler of another kind fails last: model and optimizer restored.
	st = newState(true)
	st.Scheduler = optim.NewStepLR(st.Optimizer, 2, 0.5)
	st.Extra = &extras{SamplerEpoch: 42}
	optBefore := st.Optimizer.StateDict()
	if err := LoadTraining(path, &st); !errors.Is(err, optim.ErrStateDict) {
		t.Fatalf("wrong scheduler: err = %v", err)
	}
	sameState(t, st.Model, trainedModel(1))
	if optAfter := st.Optimizer.StateDict(); len(optAfter.Tensors) != len(optBefore.Tensors) || optAfter.Meta["lr"] != optBefore.Meta["lr"] {
		t.Fatalf("optimizer changed by a failed resume: %v", optAfter.Meta)
	}
	if st.Extra.(*extras).SamplerEpoch != 42 || st.Epoch != 0 {
		t.Fatal("Extra or counters changed by a failed resume")
	}
	var wrongExtra chan int
	st = newState(true)
	st.Extra = &wrongExtra
	if err := LoadTraining(path, &st); err != nil {
		t.Fatalf("null extra into a pointer: %v", err) // nothing saved, nothing decoded
	}

	// A model file from another save (a crash between the two renames,
	// or the file lost): the sidecar alone resumes the last complete save.
	if err := Save(path, trainedModel(9)); err != nil {
		t.Fatal(err)
	}
	st = newState(true)
	if err := LoadTraining(path, &st); err != nil {
		t.Fatalf("model file from a later save: %v", err)
	}
	sameState(t, st.Model, save.Model) // the sidecar's model, not the newer file's
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	st = newState(true)
	if err := LoadTraining(path, &st); err != nil {
		t.Fatalf("model file missing: %v", err)
	}
	sameState(t, st.Model, save.Model)

	// A sidecar that is a plain model file.
	if err := Save(TrainingPath(path), trainedModel(1)); err != nil {
		t.Fatal(err)
	}
	if err := LoadTraining(path, &st); err == nil || !strings.Contains(err.Error(), "not a gotrain training state") {
		t.Fatalf("plain file as sidecar: err = %v", err)
	}
	if err := SaveTraining(path, TrainingState{Model: trainedModel(1)}); err == nil {
		t.Fatal("SaveTraining without an optimizer succeeded")
	}
	if err := SaveTraining(path, TrainingState{Model: save.Model, Optimizer: save.Optimizer, Extra: func() {}}); err == nil || !strings.Contains(err.Error(), "Extra") {
		t.Fatalf("unencodable Extra: err = %v", err)
	}
}

func TestTrainingPath(t *testing.T) {
	for in, want := range map[string]string{
		"run/model.safetensors": "run/model.train.safetensors",
		"ckpt":                  "ckpt.train.safetensors",
	} {
		if got := TrainingPath(in); got != want {
			t.Errorf("TrainingPath(%q) = %q, want %q", in, got, want)
		}
	}
}
