package checkpoint

import (
	"bytes"
	"io"
	"testing"

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
