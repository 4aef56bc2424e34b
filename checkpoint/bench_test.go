package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// mlpEntries has the MNIST MLP's state dict shapes (784-512-512-10).
func mlpEntries() []Entry {
	shapes := map[string][]int{
		"1.weight": {512, 784}, "1.bias": {512}, "3.weight": {512, 512},
		"3.bias": {512}, "5.weight": {10, 512}, "5.bias": {10},
	}
	var out []Entry
	for name, s := range shapes {
		out = append(out, Entry{Name: name, Tensor: tensor.Full(0.25, s...)})
	}
	return out
}

func entryBytes(es []Entry) int64 {
	var n int64
	for _, e := range es {
		n += int64(4 * e.Tensor.Len())
	}
	return n
}

func BenchmarkWriteTensors(b *testing.B) {
	es := mlpEntries()
	b.SetBytes(entryBytes(es))
	for b.Loop() {
		if err := WriteTensors(io.Discard, es, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadTensors(b *testing.B) {
	es := mlpEntries()
	var buf bytes.Buffer
	if err := WriteTensors(&buf, es, nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(entryBytes(es))
	for b.Loop() {
		if _, _, err := ReadTensors(buf.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
}

// cnnEntries is the state dict of the MNIST CNN (models.MNISTNet, 1.2 M
// parameters, 4.8 MB), as its checkpoint stores it.
func cnnEntries() []Entry {
	// The MNIST CNN of nn/models (which imports this package) as layers.
	return modelEntries(nn.Sequential(
		nn.Conv2d(1, 32, 3), nn.ReLU(),
		nn.Conv2d(32, 64, 3), nn.ReLU(),
		nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(),
		nn.Linear(9216, 128), nn.ReLU(),
		nn.Dropout(0.5), nn.Linear(128, 10),
	))
}

// BenchmarkCNNCheckpoint measures what the per-tensor checksums and the
// finite check cost on the MNIST CNN's checkpoint, side by side with the
// same work without them: encoding and decoding in memory (CPU only), and
// Save and load through a file (with fsync, as a checkpoint is written).
func BenchmarkCNNCheckpoint(b *testing.B) {
	es := cnnEntries()
	n := entryBytes(es)
	encoded := func(sum bool) []byte {
		var buf bytes.Buffer
		if err := writeTensorsSummed(&buf, es, modelMeta, sum); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, sum := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "crc32c"}[sum]
		b.Run("encode/"+name, func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				if err := writeTensorsSummed(io.Discard, es, modelMeta, sum); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("save/"+name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "cnn.safetensors")
			b.SetBytes(n)
			for b.Loop() {
				if err := WriteFileAtomic(path, func(w io.Writer) error { return writeTensorsSummed(w, es, modelMeta, sum) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// Reading: a file without checksums and with AllowNonFinite does
	// neither check (a PyTorch file read that way); then the checksums
	// alone; then both, the default.
	for _, c := range []struct {
		name string
		sum  bool
		opts []Option
	}{
		{"plain", false, []Option{AllowNonFinite()}},
		{"crc32c", true, []Option{AllowNonFinite()}},
		{"crc32c+finite", true, nil},
	} {
		data := encoded(c.sum)
		b.Run("decode/"+c.name, func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				if _, _, err := ReadTensors(data, c.opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("load/"+c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "cnn.safetensors")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(n)
			for b.Loop() {
				if _, _, err := ReadTensorsFile(path, c.opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTensorHash compares the checksum gotrain uses with SHA-256 over
// the MNIST CNN's tensor bytes: the figures behind the choice of CRC-32C.
func BenchmarkTensorHash(b *testing.B) {
	var data []byte
	for _, e := range cnnEntries() {
		data = append(data, float32Bytes(e.Tensor.Data())...)
	}
	b.Run("crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			crc32.Checksum(data, castagnoli)
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sha256.Sum256(data)
		}
	})
}
