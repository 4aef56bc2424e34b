package checkpoint

import (
	"fmt"
	"io"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// modelEntries returns m's state dict as safetensors entries, integer
// buffers as I64 so that PyTorch gets its own dtypes back.
func modelEntries(m nn.Module) []Entry {
	sd := nn.StateDict(m)
	entries := make([]Entry, len(sd))
	for i, e := range sd {
		dt := F32
		if e.Dtype == nn.Int64 {
			dt = I64
		}
		entries[i] = Entry{Name: e.Name, DType: dt, Tensor: e.Tensor}
	}
	return entries
}

// WriteModel writes m's state dict to w as a safetensors file with the
// metadata {"format": "pt"} that PyTorch's safetensors loader expects.
func WriteModel(w io.Writer, m nn.Module) error {
	return WriteTensors(w, modelEntries(m), modelMeta)
}

var modelMeta = map[string]string{"format": "pt"}

// Save writes m's state dict (PyTorch names and layouts) to path as a
// safetensors file, atomically: path holds the old file or the new one,
// never a partial file. The file loads into the same PyTorch model with
// model.load_state_dict(safetensors.torch.load_file(path)).
func Save(path string, m nn.Module) error {
	entries := modelEntries(m)
	return WriteFileAtomic(path, func(w io.Writer) error { return writeTensors(w, entries, modelMeta) })
}

// Load reads the safetensors file at path into m, strictly: every key of
// the model must be in the file with the same shape, and the file must
// have no other key. A missing, truncated or corrupt file, or a state dict
// that does not fit (the error wraps nn's *StateDictError, which lists the
// missing, unexpected and mis-shaped keys), is an error naming the file;
// on error m is unchanged. The tensors are checked as ReadTensorsFile
// checks them (opts).
func Load(path string, m nn.Module, opts ...Option) error {
	entries, _, err := ReadTensorsFile(path, opts...)
	if err != nil {
		return err
	}
	return loadEntries(path, m, entries)
}

func loadEntries(path string, m nn.Module, entries []Entry) error {
	sd := make(map[string]*tensor.Tensor, len(entries))
	for _, e := range entries {
		sd[e.Name] = e.Tensor
	}
	if err := nn.LoadStateDict(m, sd, true); err != nil {
		return fmt.Errorf("checkpoint: loading %s: the model does not match the saved one: %w", path, err)
	}
	return nil
}
