package checkpoint_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/tensor"
)

// writerModels are a GPT (tied wte/lm_head, biases) and a layer stack
// with a BatchNorm (float buffers and an int64 counter).
func writerModels() map[string]nn.Module {
	gpt := models.GPT(models.GPTConfig{VocabSize: 23, BlockSize: 8, NLayer: 3, NHead: 2, NEmbd: 8, Bias: true})
	gpt.ResetParameters(tensor.NewRNG(3))
	bn := nn.BatchNorm1d(5)
	stack := nn.Sequential(nn.Linear(4, 5), bn, nn.Linear(5, 3))
	copy(bn.NumBatchesTracked.Data(), []float32{7})
	for i, b := range nn.NamedBuffers(stack) {
		for j := range b.Tensor.Data() {
			if b.Name != "1.num_batches_tracked" {
				b.Tensor.Data()[j] = float32(i+j) / 3
			}
		}
	}
	return map[string]nn.Module{"gpt": gpt, "batchnorm": stack}
}

// TestModelWriterMatchesSave: a model file written tensor by tensor, in
// reverse order, each parameter holding its values only while it is
// written (as a sharded model's units are gathered), has the bytes Save
// writes, and loads back into the model.
func TestModelWriterMatchesSave(t *testing.T) {
	dir := t.TempDir()
	for name, m := range writerModels() {
		want := filepath.Join(dir, name+".want.safetensors")
		if err := checkpoint.Save(want, m); err != nil {
			t.Fatal(err)
		}
		params := nn.Parameters(m)
		values := map[*tensor.Tensor][]float32{}
		for _, p := range params {
			values[p] = p.Data()
			p.SetData(nil)
		}
		path := filepath.Join(dir, name+".safetensors")
		w, err := checkpoint.CreateModel(path, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range slices.Backward(params) {
			p.SetData(values[p])
			if err := w.Write(p); err != nil {
				t.Fatal(err)
			}
			p.SetData(nil)
		}
		for _, b := range w.Pending() { // the buffers
			if err := w.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		for _, p := range params {
			p.SetData(values[p])
		}
		a, _ := os.ReadFile(want)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: the streamed file (%d bytes) differs from Save's (%d bytes)", name, len(b), len(a))
		}
		if err := checkpoint.Load(path, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModelWriterRefuses: a tensor without its values, one not in the
// model, one written twice, and a commit with tensors never written are
// errors naming the tensor; a failed commit leaves no file behind.
func TestModelWriterRefuses(t *testing.T) {
	dir := t.TempDir()
	m := writerModels()["gpt"]
	path := filepath.Join(dir, "gpt.safetensors")
	w, err := checkpoint.CreateModel(path, m)
	if err != nil {
		t.Fatal(err)
	}
	wpe := m.(*models.GPTModel).WPE.Weight
	if err := w.Write(wpe); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(wpe); err == nil || !strings.Contains(err.Error(), `wpe.weight" written twice`) {
		t.Errorf("second Write = %v, want an error naming wpe.weight", err)
	}
	if err := w.Write(tensor.Zeros(2, 2)); err == nil || !strings.Contains(err.Error(), "not in the model's state dict") {
		t.Errorf("Write of another tensor = %v", err)
	}
	wte := m.(*models.GPTModel).WTE.Weight
	saved := wte.Data()
	wte.SetData(nil)
	err = w.Write(wte)
	wte.SetData(saved)
	if err == nil || !strings.Contains(err.Error(), "holds 0 values") {
		t.Errorf("Write of a freed parameter = %v", err)
	}
	err = w.Commit()
	if err == nil || !strings.Contains(err.Error(), "tensors never written: ") || !strings.Contains(err.Error(), "wte.weight") ||
		!strings.Contains(err.Error(), "lm_head.weight") || strings.Contains(err.Error(), "wpe.weight") {
		t.Fatalf("Commit = %v, want the unwritten tensors named", err)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Fatalf("a failed commit left %v", left)
	}
}
