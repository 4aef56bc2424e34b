package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// rawFile assembles a safetensors file from a header string and data.
func rawFile(hdr string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(hdr)))
	b.WriteString(hdr)
	b.Write(data)
	return b.Bytes()
}

func le32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestWriteLayoutMatchesReferenceLibrary(t *testing.T) {
	var buf bytes.Buffer
	err := WriteTensors(&buf, []Entry{
		{Name: "w", Tensor: tensor.New([]float32{1, 2}, 2)},
		{Name: "bn.num_batches_tracked", DType: I64, Tensor: tensor.Scalar(7)},
		{Name: "a", Tensor: tensor.New([]float32{3}, 1, 1)},
	}, map[string]string{"z": "1", "format": "pt", "<&>": "x"})
	if err != nil {
		t.Fatal(err)
	}
	// I64 sorts before F32 (descending dtype), then names; metadata first,
	// with the checksums of the bytes below; no HTML escaping; spaces pad
	// the header to a multiple of 8.
	crc := func(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }
	sums := fmt.Sprintf(`{\"a\":\"%08x\",\"bn.num_batches_tracked\":\"%08x\",\"w\":\"%08x\"}`,
		crc(le32(3)), crc(binary.LittleEndian.AppendUint64(nil, 7)), crc(le32(1, 2)))
	hdr := `{"__metadata__":{"<&>":"x","format":"pt","gotrain.crc32c":"` + sums + `","z":"1"},` +
		`"bn.num_batches_tracked":{"dtype":"I64","shape":[],"data_offsets":[0,8]},` +
		`"a":{"dtype":"F32","shape":[1,1],"data_offsets":[8,12]},` +
		`"w":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}`
	hdr += strings.Repeat(" ", (8-len(hdr)%8)%8)
	data := binary.LittleEndian.AppendUint64(nil, 7)
	data = append(data, le32(3, 1, 2)...)
	if want := rawFile(hdr, data); !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("layout differs:\n got %q\nwant %q", buf.Bytes(), want)
	}

	entries, meta, err := ReadTensors(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "pt" || meta["<&>"] != "x" || len(meta) != 4 {
		t.Fatalf("metadata %v", meta)
	}
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Name] = e
	}
	if e := got["bn.num_batches_tracked"]; e.DType != I64 || e.Tensor.Item() != 7 || len(e.Tensor.Shape()) != 0 {
		t.Fatalf("I64 entry %+v %v", e, e.Tensor)
	}
	if e := got["w"]; e.DType != F32 || !slices.Equal(e.Tensor.Data(), []float32{1, 2}) || !slices.Equal(e.Tensor.Shape(), []int{2}) {
		t.Fatalf("w entry %v", e.Tensor)
	}
}

func TestWriteRejects(t *testing.T) {
	cases := map[string][]Entry{
		"duplicate tensor name": {{Name: "a", Tensor: tensor.Zeros(1)}, {Name: "a", Tensor: tensor.Zeros(2)}},
		"invalid tensor name":   {{Name: "", Tensor: tensor.Zeros(1)}},
		"is nil":                {{Name: "a"}},
		"not supported":         {{Name: "a", DType: F16, Tensor: tensor.Zeros(1)}},
		"not an integer":        {{Name: "a", DType: I64, Tensor: tensor.Scalar(1.5)}},
	}
	for want, entries := range cases {
		if err := WriteTensors(&bytes.Buffer{}, entries, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one containing %q", err, want)
		}
	}
}

func TestReadDTypes(t *testing.T) {
	var data []byte
	data = binary.LittleEndian.AppendUint64(data, math.Float64bits(-2.5))     // F64
	data = binary.LittleEndian.AppendUint64(data, uint64(0xFFFFFFFFFFFFFFFD)) // I64 -3
	data = binary.LittleEndian.AppendUint32(data, uint32(0xFFFFFFFF))         // I32 -1
	data = append(data, le32(0.25)...)                                        // F32
	// F16: 1.0, -2.0, smallest subnormal 2^-24, +Inf; BF16: 1.0, -0.5
	for _, h := range []uint16{0x3c00, 0xc000, 0x0001, 0x7c00, 0x3f80, 0xbf00} {
		data = binary.LittleEndian.AppendUint16(data, h)
	}
	hdr := `{"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},` +
		`"l":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},` +
		`"i":{"dtype":"I32","shape":[1],"data_offsets":[16,20]},` +
		`"f":{"dtype":"F32","shape":[1],"data_offsets":[20,24]},` +
		`"h":{"dtype":"F16","shape":[2,2],"data_offsets":[24,32]},` +
		`"b":{"dtype":"BF16","shape":[2],"data_offsets":[32,36]}}`
	if _, _, err := ReadTensors(rawFile(hdr, data)); !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), `tensor "h" holds +Inf at element 3`) {
		t.Fatalf("reading +Inf without AllowNonFinite: err = %v, want ErrNonFinite naming tensor h", err)
	}
	entries, _, err := ReadTensors(rawFile(hdr, data), AllowNonFinite())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{
		"d": {-2.5}, "l": {-3}, "i": {-1}, "f": {0.25},
		"h": {1, -2, float32(math.Ldexp(1, -24)), float32(math.Inf(1))}, "b": {1, -0.5},
	}
	for _, e := range entries {
		if !slices.Equal(e.Tensor.Data(), want[e.Name]) {
			t.Errorf("%s (%s): got %v, want %v", e.Name, e.DType, e.Tensor.Data(), want[e.Name])
		}
	}
	if names := []string{entries[0].Name, entries[5].Name}; !slices.Equal(names, []string{"d", "b"}) {
		t.Errorf("entries not in data order: %v", names)
	}
}

func TestHalfToFloat32Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got := halfToFloat32(uint16(h))
		// Reference: decode binary16 in float64 arithmetic.
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		exp, mant := (h>>10)&0x1f, h&0x3ff
		var want float64
		switch {
		case exp == 0x1f && mant == 0:
			want = sign * math.Inf(1)
		case exp == 0x1f:
			if !math.IsNaN(float64(got)) {
				t.Fatalf("%#04x: got %v, want NaN", h, got)
			}
			continue
		case exp == 0:
			want = sign * math.Ldexp(float64(mant), -24)
		default:
			want = sign * math.Ldexp(1+float64(mant)/1024, exp-15)
		}
		if float64(got) != want || math.Signbit(float64(got)) != (sign < 0) {
			t.Fatalf("%#04x: got %v, want %v", h, got, want)
		}
	}
}

func TestReadCorrupt(t *testing.T) {
	good := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	data8 := le32(1, 2)
	huge := make([]byte, 8)
	binary.LittleEndian.PutUint64(huge, 1<<62)
	overCap := make([]byte, 16)
	binary.LittleEndian.PutUint64(overCap, MaxHeaderSize+1)
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "shorter than the 8-byte header length"},
		{"huge header length", append(huge, "{}"...), "exceeds the 100000000-byte limit"},
		{"header length over cap", overCap, "exceeds the 100000000-byte limit"},
		{"truncated header", rawFile(good, data8)[:20], "exceeds the 12 bytes after the length field"},
		{"truncated data", rawFile(good, data8)[:len(rawFile(good, data8))-1], "out of range of the 7-byte data section"},
		{"extra data", rawFile(good, append(data8, 0)), "cover 8 bytes but the data section has 9"},
		{"not JSON", rawFile("{not json", nil), "not valid JSON"},
		{"not an object", rawFile(`[1,2]`, nil), "not a JSON object"},
		{"trailing garbage", rawFile(good+`x`, data8), "trailing bytes"},
		{"duplicate key", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`, nil), `duplicate header key "a"`},
		{"unknown dtype", rawFile(`{"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}}`, data8), `unknown dtype "Q7"`},
		{"unknown field", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, data8), "invalid entry"},
		{"missing shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, data8), "missing shape"},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, data8), "negative dimension"},
		{"overflowing shape", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, data8), "overflows"},
		{"span mismatch", rawFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, data8), "needs 12 bytes but data_offsets [0, 8] span 8"},
		{"offsets length", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}`, data8), "must be [begin, end]"},
		{"offsets out of range", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, data8), "out of range"},
		{"offsets reversed", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, data8), "out of range"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8), `overlap the previous tensor "a"`},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8), "leave a gap"},
		{"metadata not strings", rawFile(`{"__metadata__":{"a":1}}`, nil), "__metadata__ is not an object of strings"},
		{"float offsets", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}}`, data8), "invalid entry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ReadTensors(c.file)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrCorrupt containing %q", err, c.want)
			}
			// The same through a file: the error names it.
			path := filepath.Join(t.TempDir(), "bad.safetensors")
			if err := os.WriteFile(path, c.file, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err = ReadTensorsFile(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("file err = %v, want ErrCorrupt naming %s and containing %q", err, path, c.want)
			}
		})
	}
}

func TestReadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.safetensors")
	_, _, err := ReadTensorsFile(path)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrNotExist naming the file", err)
	}
}

func TestEmptyAndZeroSizedTensors(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTensors(&buf, []Entry{{Name: "z", Tensor: tensor.Zeros(0, 3)}}, nil); err != nil {
		t.Fatal(err)
	}
	entries, meta, err := ReadTensors(buf.Bytes())
	if err != nil || len(entries) != 1 || entries[0].Tensor.Len() != 0 || !slices.Equal(entries[0].Tensor.Shape(), []int{0, 3}) || len(meta) != 1 || meta[ChecksumKey] != `{"z":"00000000"}` {
		t.Fatalf("entries %v meta %v err %v", entries, meta, err)
	}
	buf.Reset()
	if err := WriteTensors(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	if entries, _, err := ReadTensors(buf.Bytes()); err != nil || len(entries) != 0 {
		t.Fatalf("empty file: %v %v", entries, err)
	}
}

// FuzzReadTensors checks that no input makes the reader panic or return
// entries inconsistent with the file size.
func FuzzReadTensors(f *testing.F) {
	var buf bytes.Buffer
	_ = WriteTensors(&buf, []Entry{
		{Name: "w", Tensor: tensor.New([]float32{1, 2, 3, 4}, 2, 2)},
		{Name: "n", DType: I64, Tensor: tensor.Scalar(3)},
	}, map[string]string{"k": "v"})
	f.Add(buf.Bytes())
	f.Add(rawFile(`{"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, []byte{0, 0x3c, 0, 0xc0}))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, le32(1, 2)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, file []byte) {
		if _, _, err := ReadTensors(file); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNonFinite) {
			t.Fatalf("error %v wraps neither ErrCorrupt nor ErrNonFinite", err)
		}
		entries, _, err := ReadTensors(file, AllowNonFinite())
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		total := 0
		for _, e := range entries {
			total += e.Tensor.Len() * e.DType.Size()
		}
		if total > len(file) {
			t.Fatalf("entries hold %d bytes, file has %d", total, len(file))
		}
	})
}
