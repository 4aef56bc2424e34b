package checkpoint

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

var update = flag.Bool("update", false, "rewrite testdata/gotrain_model.* for check_in_torch.py")

// interopModel is gen_torch_model.py's model with gotrain's layers.
func interopModel() nn.Module {
	return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))
}

type logitsFile struct {
	InputShape  []int     `json:"input_shape"`
	Input       []float32 `json:"input"`
	LogitsShape []int     `json:"logits_shape"`
	Logits      []float64 `json:"logits"`
}

func readLogits(t *testing.T, path string) logitsFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f logitsFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func evalLogits(m nn.Module, f logitsFile) *tensor.Tensor {
	nn.SetTrain(m, false)
	var out *tensor.Tensor
	tensor.NoGrad(func() { out = m.Forward(tensor.New(append([]float32(nil), f.Input...), f.InputShape...)) })
	return out
}

// TestInteropTorchToGotrain loads the file PyTorch wrote
// (testdata/gen_torch_model.py) and checks gotrain computes PyTorch's
// logits with it.
func TestInteropTorchToGotrain(t *testing.T) {
	m := interopModel()
	if err := Load("testdata/torch_model.safetensors", m); err != nil {
		t.Fatal(err)
	}
	f := readLogits(t, "testdata/torch_model_logits.json")
	got := evalLogits(m, f)
	if len(got.Data()) != len(f.Logits) {
		t.Fatalf("logits shape %v, torch %v", got.Shape(), f.LogitsShape)
	}
	for i, v := range got.Data() {
		if want := f.Logits[i]; math.Abs(float64(v)-want) > 1e-5*math.Max(math.Abs(want), 0.1) {
			t.Fatalf("logit %d: gotrain %.8g, torch %.8g", i, v, want)
		}
	}
	for _, e := range nn.StateDict(m) {
		if e.Name == "2.num_batches_tracked" && e.Tensor.Item() != 3 {
			t.Fatalf("num_batches_tracked %v, torch 3", e.Tensor.Item())
		}
	}
}

// TestInteropGotrainToTorch writes the model check_in_torch.py loads into
// PyTorch. The weights are PyTorch's, changed deterministically so that the
// file could not pass by being a copy. Without -update it checks the
// committed files are exactly what the writer produces now.
func TestInteropGotrainToTorch(t *testing.T) {
	m := interopModel()
	if err := Load("testdata/torch_model.safetensors", m); err != nil {
		t.Fatal(err)
	}
	for k, e := range nn.StateDict(m) {
		d := e.Tensor.Data()
		for i := range d {
			switch {
			case e.Dtype == nn.Int64:
				d[i] += 5
			case e.Name == "2.running_var":
				d[i] *= 1.5
			default:
				d[i] += 0.05 * float32(math.Sin(float64(3*k+i)))
			}
		}
	}
	f := readLogits(t, "testdata/torch_model_logits.json")
	logits := evalLogits(m, f)
	f.LogitsShape = logits.Shape()
	f.Logits = f.Logits[:0]
	for _, v := range logits.Data() {
		f.Logits = append(f.Logits, float64(v))
	}
	js, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	js = append(js, '\n')
	var model bytes.Buffer
	if err := WriteModel(&model, m); err != nil {
		t.Fatal(err)
	}
	modelPath, logitsPath := "testdata/gotrain_model.safetensors", "testdata/gotrain_model_logits.json"
	if *update {
		if err := Save(modelPath, m); err != nil {
			t.Fatal(err)
		}
		if err := WriteFileAtomic(logitsPath, func(w io.Writer) error { _, err := w.Write(js); return err }); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and %s; run /usr/bin/python3 testdata/check_in_torch.py", modelPath, logitsPath)
		return
	}
	// The file must be exactly what the writer produces now; the logits,
	// which depend on nn's kernels, only within float32 rounding.
	got, err := os.ReadFile(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model.Bytes()) {
		t.Errorf("%s differs from what gotrain writes now; rerun with -update and check_in_torch.py", filepath.Base(modelPath))
	}
	committed := readLogits(t, logitsPath)
	if len(committed.Logits) != len(f.Logits) {
		t.Fatalf("%s has %d logits, model gives %d", logitsPath, len(committed.Logits), len(f.Logits))
	}
	for i, want := range committed.Logits {
		if got := f.Logits[i]; math.Abs(got-want) > 1e-5*math.Max(math.Abs(want), 0.1) {
			t.Fatalf("logit %d: %v now, %v in %s", i, got, want, logitsPath)
		}
	}
}
