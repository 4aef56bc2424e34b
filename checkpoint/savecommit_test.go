package checkpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
)

// fullDisk is a temporary file whose writes fail with ENOSPC once limit
// bytes have been written, as on a disk that fills up mid-save.
type fullDisk struct {
	*os.File
	limit int
}

func (f *fullDisk) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n, _ := f.File.Write(p[:f.limit])
		f.limit = 0
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.limit -= len(p)
	return f.File.Write(p)
}

// failWritesTo makes the temporary files of saves to files named base
// fail after limit bytes, until the returned function or the end of the
// test puts the real files back.
func failWritesTo(t *testing.T, base string, limit int) (restore func()) {
	t.Helper()
	orig := createTemp
	restore = func() { createTemp = orig }
	t.Cleanup(restore)
	createTemp = func(dir, pattern string) (tempFile, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil || !strings.HasPrefix(pattern, "."+base+".tmp-") {
			return f, err
		}
		return &fullDisk{File: f, limit: limit}, nil
	}
	return restore
}

func newSGDState(m nn.Module) TrainingState {
	opt := optim.NewSGD(nn.Parameters(m), 0.1, optim.Momentum(0.9))
	return TrainingState{Model: m, Optimizer: opt, Scheduler: optim.NewStepLR(opt, 2, 0.5)}
}

// A disk that fills while either file of a training checkpoint is
// written leaves the directory as it was: no first save strands a model
// file without its training state, and a later save keeps the previous
// pair, from which a resume works.
func TestSaveTrainingFullDiskKeepsPreviousPair(t *testing.T) {
	for _, c := range []struct{ name, failing string }{
		{"model file", "run.safetensors"},
		{"training state", "run.train.safetensors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "run.safetensors")
			func() {
				defer failWritesTo(t, c.failing, 4096)()
				err := SaveTraining(path, newSGDState(trainedModel(1)))
				if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(dir, c.failing)) {
					t.Fatalf("first save on a full disk: err = %v, want ENOSPC naming %s", err, c.failing)
				}
				if names := dirNames(t, dir); len(names) != 0 {
					t.Fatalf("a failed first save left %v", names)
				}
				st := newSGDState(trainedModel(2))
				if err := LoadTraining(path, &st); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("resume after a failed first save: err = %v, want fs.ErrNotExist (start afresh)", err)
				}
			}()

			saved := newSGDState(trainedModel(3))
			saved.Epoch, saved.Step = 1, 10
			if err := SaveTraining(path, saved); err != nil {
				t.Fatal(err)
			}
			model, _ := os.ReadFile(path)
			side, _ := os.ReadFile(TrainingPath(path))

			failWritesTo(t, c.failing, 4096)
			next := newSGDState(trainedModel(4))
			next.Epoch, next.Step = 2, 20
			if err := SaveTraining(path, next); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("second save on a full disk: err = %v, want ENOSPC", err)
			}
			if names := dirNames(t, dir); !slices.Equal(names, []string{"run.safetensors", "run.train.safetensors"}) {
				t.Fatalf("a failed save left %v", names)
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, model) {
				t.Fatal("a failed save changed the model file")
			}
			if b, _ := os.ReadFile(TrainingPath(path)); !bytes.Equal(b, side) {
				t.Fatal("a failed save changed the training state")
			}
			st := newSGDState(trainedModel(5))
			if err := LoadTraining(path, &st); err != nil {
				t.Fatalf("resume after a failed save: %v", err)
			}
			if st.Epoch != 1 || st.Step != 10 {
				t.Fatalf("resumed at epoch %d step %d, want the previous save's 1, 10", st.Epoch, st.Step)
			}
			sameState(t, st.Model, saved.Model)
			plain := interopModel()
			if err := Load(path, plain); err != nil {
				t.Fatal(err)
			}
			sameState(t, plain, saved.Model)
		})
	}
}

// Resuming a checkpoint of one model into another, whose optimizer and
// scheduler differ too, names the model keys that do not match, briefly.
func TestLoadTrainingOtherModelNamesTheModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mlp.safetensors")
	var layers []nn.Module
	for range 30 {
		layers = append(layers, nn.Linear(2, 2))
	}
	mlp := nn.Sequential(layers...)
	if err := SaveTraining(path, TrainingState{Model: mlp, Optimizer: optim.NewSGD(nn.Parameters(mlp), 0.1)}); err != nil {
		t.Fatal(err)
	}
	other := trainedModel(1)
	opt := optim.NewAdam(nn.Parameters(other), 0.1)
	st := TrainingState{Model: other, Optimizer: opt, Scheduler: optim.NewStepLR(opt, 1, 0.7)}
	err := LoadTraining(path, &st)
	var serr *nn.StateDictError
	if !errors.As(err, &serr) || !strings.Contains(err.Error(), "the model does not match the saved one") ||
		strings.Contains(err.Error(), "cheduler") || len(err.Error()) > 600 {
		t.Fatalf("err = %v (%d bytes); want a short model mismatch, not the scheduler", err, len(err.Error()))
	}
	sameState(t, other, trainedModel(1))
}
