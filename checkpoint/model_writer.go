package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// ModelWriter writes the model file Save writes, byte for byte, from
// tensors that arrive one at a time and in any order, so that the whole
// model need never be in memory at once (a sharded model's parameters
// gathered unit by unit). The file's layout comes from the shapes of the
// module's state dict alone, whose tensors need hold no values when
// CreateModel is called; each tensor's values go to their place in the
// file as they arrive, and Commit puts the header, with the checksums,
// in front and the file at its path atomically, as Save does. A
// ModelWriter is for one goroutine.
type ModelWriter struct {
	path    string
	f       tempFile
	at      io.WriterAt
	sorted  []Entry // in data order
	offsets []int64 // of each entry's data in the file
	sums    []uint32
	written []bool
	index   map[*tensor.Tensor][]int // the entries of each tensor (a tied weight has several)
	hdrLen  int
	buf     []byte
	done    bool
}

// CreateModel starts the model file of m at path: a temporary file
// beside it until Commit. Call Abort if Commit is not reached.
func CreateModel(path string, m nn.Module) (*ModelWriter, error) {
	sorted, err := layoutEntries(modelEntries(m))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	f, err := createTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	at, ok := f.(io.WriterAt)
	if !ok {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("checkpoint: writing %s: the temporary file cannot be written at offsets", path)
	}
	w := &ModelWriter{path: path, f: f, at: at, sorted: sorted, offsets: make([]int64, len(sorted)),
		sums: make([]uint32, len(sorted)), written: make([]bool, len(sorted)), index: map[*tensor.Tensor][]int{},
		buf: make([]byte, 0, 64<<10)}
	// The checksums are 8 hex digits whatever their value: the header's
	// length, and so the data's place, is known before any of it.
	w.hdrLen = len(w.header())
	off := int64(8 + w.hdrLen)
	for i, e := range sorted {
		w.offsets[i] = off
		off += int64(numelInts(e.Tensor.Shape())) * int64(e.DType.Size())
		w.index[e.Tensor] = append(w.index[e.Tensor], i)
	}
	return w, nil
}

// header is the file's JSON header with the checksums as they are.
func (w *ModelWriter) header() []byte {
	meta := maps.Clone(modelMeta)
	if len(w.sorted) > 0 {
		sums := make(map[string]string, len(w.sorted))
		for i, e := range w.sorted {
			sums[e.Name] = fmt.Sprintf("%08x", w.sums[i])
		}
		js, err := json.Marshal(sums)
		if err != nil {
			panic("checkpoint: encoding a map of strings failed: " + err.Error())
		}
		meta[ChecksumKey] = string(js)
	}
	return encodeHeader(w.sorted, meta)
}

// Write writes the values t holds now, under every name the module's
// state dict gives t. t must be one of the state dict's tensors, holding
// all its values; each is written once.
func (w *ModelWriter) Write(t *tensor.Tensor) error {
	idx, ok := w.index[t]
	if !ok {
		return fmt.Errorf("checkpoint: writing %s: a tensor of shape %v that is not in the model's state dict", w.path, t.Shape())
	}
	if n := numelInts(t.Shape()); t.Len() != n {
		return fmt.Errorf("checkpoint: writing %s: tensor %q holds %d values, its shape %v %d", w.path, w.sorted[idx[0]].Name, t.Len(), t.Shape(), n)
	}
	for _, i := range idx {
		e := w.sorted[i]
		if w.written[i] {
			return fmt.Errorf("checkpoint: writing %s: tensor %q written twice", w.path, e.Name)
		}
		off, crc := w.offsets[i], uint32(0)
		var err error
		w.buf, err = encodeChunks(w.buf, e, func(b []byte) error {
			crc = crc32.Update(crc, castagnoli, b)
			if _, err := w.at.WriteAt(b, off); err != nil {
				return fmt.Errorf("writing tensor %q: %w", e.Name, err)
			}
			off += int64(len(b))
			return nil
		})
		if err != nil {
			return fmt.Errorf("checkpoint: writing %s: %w", w.path, err)
		}
		w.sums[i], w.written[i] = crc, true
	}
	return nil
}

// Pending returns the tensors not written yet, in the file's order.
func (w *ModelWriter) Pending() []*tensor.Tensor {
	var out []*tensor.Tensor
	seen := map[*tensor.Tensor]bool{}
	for i, e := range w.sorted {
		if !w.written[i] && !seen[e.Tensor] {
			seen[e.Tensor] = true
			out = append(out, e.Tensor)
		}
	}
	return out
}

// Commit writes the header, fsyncs the file and renames it to the path,
// atomically: the path holds its previous content or the whole new file.
// Every tensor must have been written; otherwise Commit fails naming
// those that were not, and the path is untouched.
func (w *ModelWriter) Commit() (err error) {
	if w.done {
		return fmt.Errorf("checkpoint: writing %s: the model file is committed or aborted already", w.path)
	}
	defer func() {
		if err != nil {
			w.Abort()
		}
	}()
	var missing []string
	for i, e := range w.sorted {
		if !w.written[i] {
			missing = append(missing, e.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("checkpoint: writing %s: tensors never written: %s", w.path, strings.Join(missing, ", "))
	}
	hdr := w.header()
	if len(hdr) != w.hdrLen {
		panic(fmt.Sprintf("checkpoint: the model file's header is %d bytes, %d were reserved", len(hdr), w.hdrLen))
	}
	head := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	if _, err := w.at.WriteAt(append(head, hdr...), 0); err != nil {
		return fmt.Errorf("checkpoint: writing %s: writing header: %w", w.path, err)
	}
	if err := w.f.Chmod(0o644); err != nil {
		return fmt.Errorf("checkpoint: writing %s: %w", w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("checkpoint: writing %s: fsync: %w", w.path, err)
	}
	tmp := w.f.Name()
	w.done = true
	if err := w.f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoint: writing %s: %w", w.path, err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoint: writing %s: %w", w.path, err)
	}
	if err := syncDir(filepath.Dir(w.path)); err != nil {
		return fmt.Errorf("checkpoint: writing %s: fsync directory: %w", w.path, err)
	}
	return nil
}

// Abort removes the temporary file; the path is untouched. After Commit
// it does nothing.
func (w *ModelWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.f.Close()
	os.Remove(w.f.Name())
}

// numelInts is the number of elements of shape.
func numelInts(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
