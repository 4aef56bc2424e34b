package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// TrainingContent is what a training checkpoint (SaveTraining's) holds,
// read but loaded into nothing: for a run that keeps only part of it,
// such as a sharded run resuming from a DDP checkpoint, which keeps its
// shards of the model and of the optimizer's state.
type TrainingContent struct {
	// Model is the model's state dict by name (a tied weight under each
	// of its names).
	Model map[string]*tensor.Tensor
	// Optimizer is the optimizer's state dict: per-parameter entries
	// ("state.<i>.<buffer>") by the parameter's place in the optimizer
	// that saved it.
	Optimizer optim.State
	// Scheduler is the scheduler's state's metadata, empty when none was
	// saved.
	Scheduler map[string]string
	// Epoch and Step are the saved counters.
	Epoch int
	Step  int64
	// Extra is the JSON of the saved Extra.
	Extra []byte
}

// ReadTrainingFrom reads rank 0's training checkpoint at path (its
// sidecar TrainingPath(path)) on every rank of g, as ResumeFrom does:
// rank 0 reads the file and sends its bytes, so that ranks need no
// shared file system. It reports on every rank whether rank 0 had a
// checkpoint; rank 0's error (a corrupt file, a model file without its
// sidecar) is every rank's. A nil g, or a group of one, reads the file
// here. The tensors are checked as ReadTensorsFile checks them (opts).
// Every rank of g must call it; each holds the sidecar's bytes besides
// the decoded tensors while it reads.
func ReadTrainingFrom(ctx context.Context, g Group, path string, opts ...Option) (*TrainingContent, bool, error) {
	side := TrainingPath(path)
	var payload []byte
	name := side
	if g == nil || g.Size() == 1 {
		if err := checkSidecarExists(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, false, nil
			}
			return nil, false, err
		}
		var err error
		if payload, err = os.ReadFile(side); err != nil {
			return nil, false, fmt.Errorf("checkpoint: %w", err)
		}
	} else {
		var found bool
		var err error
		if side, payload, found, err = fetchSidecar(ctx, g, path); err != nil || !found {
			return nil, false, err
		}
		if name = side; g.Rank() != 0 {
			name = "rank 0's " + side
		}
	}
	entries, meta, err := readNamed(name, bytes.NewReader(payload), int64(len(payload)), newReadConfig(opts))
	if err != nil {
		return nil, false, err
	}
	saved, err := parseSidecar(name, entries, meta)
	if err != nil {
		return nil, false, err
	}
	tc := &TrainingContent{Model: make(map[string]*tensor.Tensor, len(saved.model)), Optimizer: saved.optState,
		Scheduler: saved.schedMeta, Epoch: saved.epoch, Step: saved.step, Extra: []byte(saved.extra)}
	for _, e := range saved.model {
		tc.Model[e.Name] = e.Tensor
	}
	return tc, true, nil
}
