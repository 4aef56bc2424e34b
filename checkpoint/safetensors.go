package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/tensor"
)

// ErrCorrupt matches (with errors.Is) every error about a malformed
// safetensors file: bad header length, invalid JSON, unknown dtype,
// inconsistent shapes or offsets, truncated data. Such errors are
// *FormatError values.
var ErrCorrupt = errors.New("checkpoint: corrupt safetensors file")

// FormatError describes what is wrong with a malformed safetensors file.
type FormatError struct {
	File   string // the file's path; empty when decoding bytes
	Reason string
}

// Error names the file and the problem.
func (e *FormatError) Error() string {
	if e.File == "" {
		return "checkpoint: corrupt safetensors file: " + e.Reason
	}
	return "checkpoint: " + e.File + ": corrupt safetensors file: " + e.Reason
}

// Is reports whether target is ErrCorrupt.
func (e *FormatError) Is(target error) bool { return target == ErrCorrupt }

// ErrNonFinite matches (with errors.Is) the error for a tensor holding a
// NaN or an infinity, read without AllowNonFinite: such a value in a
// checkpoint is almost always a diverged run or damaged data, and loading
// it would only make every later step NaN.
var ErrNonFinite = errors.New("checkpoint: non-finite value in a tensor")

// nonFiniteError names the file, the tensor and the first bad element.
type nonFiniteError struct {
	file, tensor string
	index        int
	value        float32
}

func (e *nonFiniteError) Error() string {
	file := ""
	if e.file != "" {
		file = e.file + ": "
	}
	return fmt.Sprintf("checkpoint: %stensor %q holds %v at element %d (AllowNonFinite accepts non-finite values)",
		file, e.tensor, e.value, e.index)
}

func (e *nonFiniteError) Is(target error) bool { return target == ErrNonFinite }

// ChecksumKey is the metadata key under which gotrain stores a CRC-32C
// (Castagnoli) of each tensor's bytes, as a JSON object from tensor name
// to 8 hex digits. Readers verify it when it is there; files without it
// (PyTorch's) load unchecked. CRC-32C rather than SHA-256: it detects the
// flipped bits and torn writes a checksum is for, and runs in hardware at
// memory speed, where SHA-256 would add measurably to every save.
const ChecksumKey = "gotrain.crc32c"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Option changes how a file is read.
type Option func(*readConfig)

type readConfig struct {
	allowNonFinite bool
}

// AllowNonFinite accepts NaN and infinite values in float tensors, which
// are otherwise an error wrapping ErrNonFinite.
func AllowNonFinite() Option { return func(c *readConfig) { c.allowNonFinite = true } }

func newReadConfig(opts []Option) readConfig {
	var c readConfig
	for _, o := range opts {
		o(&c)
	}
	return c
}

// MaxHeaderSize bounds the JSON header of a safetensors file, as the
// reference implementation does (100 MB), so that a corrupt length field
// cannot make a reader allocate an arbitrary amount of memory.
const MaxHeaderSize = 100_000_000

// DType is the element type of a tensor stored in a safetensors file.
type DType string

// The dtypes gotrain reads. Writers produce F32 and I64 only; everything
// is converted to float32 tensors on read.
const (
	F32  DType = "F32"
	F64  DType = "F64"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
)

// Size returns the number of bytes per element, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// isFloat reports whether d holds floating-point values, which can be
// NaN or infinite.
func (d DType) isFloat() bool { return d == F32 || d == F64 || d == F16 || d == BF16 }

// order is the rank of d in the reference implementation's Dtype enum; its
// writer lays tensors out by descending rank, then by name.
func (d DType) order() int {
	switch d {
	case F16:
		return 7
	case BF16:
		return 8
	case I32:
		return 9
	case F32:
		return 11
	case F64:
		return 12
	case I64:
		return 13
	}
	return 0
}

// Entry is one named tensor of a safetensors file. DType is the on-disk
// element type: on write F32 (the default when empty) or I64 (integer
// buffers such as BatchNorm's num_batches_tracked, whose float32 values
// must be whole numbers); on read the dtype found in the file, the values
// converted to float32.
type Entry struct {
	Name   string
	DType  DType
	Tensor *tensor.Tensor
}

// tensorInfo is a header entry as it appears in the JSON.
type tensorInfo struct {
	DType       DType   `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// header is a parsed and validated safetensors header.
type header struct {
	names    []string // in data order
	infos    []tensorInfo
	metadata map[string]string
	dataLen  int64 // bytes in the data section
}

// WriteTensors writes entries and metadata to w in the safetensors format,
// laid out as the reference Python library does: tensors ordered by dtype
// (I64 before F32) then by name, header keys in that order with
// "__metadata__" first, the header padded with spaces to a multiple of 8
// bytes. Names must be unique and non-empty. The metadata gains
// ChecksumKey, the checksums of the data written (replacing any such key
// in metadata); safetensors metadata is free-form strings, so PyTorch's
// loaders ignore it.
func WriteTensors(w io.Writer, entries []Entry, metadata map[string]string) error {
	if err := writeTensors(w, entries, metadata); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// writeTensors is WriteTensors with errors left unprefixed for callers
// that add their own context.
func writeTensors(w io.Writer, entries []Entry, metadata map[string]string) error {
	return writeTensorsSummed(w, entries, metadata, true)
}

// writeTensorsSummed is writeTensors, with the checksums only if sum is
// set (without, for the benchmark that measures their cost).
func writeTensorsSummed(w io.Writer, entries []Entry, metadata map[string]string, sum bool) error {
	sorted, err := layoutEntries(entries)
	if err != nil {
		return err
	}
	metadata = maps.Clone(metadata)
	delete(metadata, ChecksumKey)
	if sum && len(sorted) > 0 {
		sums, err := checksums(sorted)
		if err != nil {
			return err
		}
		if metadata == nil {
			metadata = map[string]string{}
		}
		metadata[ChecksumKey] = sums
	}
	hdr := encodeHeader(sorted, metadata)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return fmt.Errorf("writing header: %w", err)
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("writing header: %w", err)
	}
	return writeData(w, sorted)
}

// layoutEntries validates entries and returns a copy in the order the
// reference writer lays them out: by descending dtype rank, then by name.
// An empty DType becomes F32.
func layoutEntries(entries []Entry) ([]Entry, error) {
	sorted := make([]Entry, len(entries))
	copy(sorted, entries)
	for i := range sorted {
		if sorted[i].DType == "" {
			sorted[i].DType = F32
		}
		e := sorted[i]
		if e.Name == "" || e.Name == "__metadata__" {
			return nil, fmt.Errorf("invalid tensor name %q", e.Name)
		}
		if e.Tensor == nil {
			return nil, fmt.Errorf("tensor %q is nil", e.Name)
		}
		if e.DType != F32 && e.DType != I64 {
			return nil, fmt.Errorf("tensor %q: writing dtype %s is not supported (F32 or I64)", e.Name, e.DType)
		}
	}
	slices.SortStableFunc(sorted, func(a, b Entry) int {
		if a.DType.order() != b.DType.order() {
			return b.DType.order() - a.DType.order()
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Name == sorted[i-1].Name {
			return nil, fmt.Errorf("duplicate tensor name %q", sorted[i].Name)
		}
	}
	return sorted, nil
}

// encodeHeader returns the JSON header for entries laid out in data
// order: "__metadata__" first (keys sorted) when there is any, then one
// key per tensor, padded with spaces to a multiple of 8 bytes.
func encodeHeader(sorted []Entry, metadata map[string]string) []byte {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		encodeMetadata(&hdr, metadata)
		first = false
	}
	var offset int64
	for _, e := range sorted {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
		n := int64(numelInts(e.Tensor.Shape())) * int64(e.DType.Size())
		writeJSONString(&hdr, e.Name)
		fmt.Fprintf(&hdr, `:{"dtype":"%s","shape":[`, e.DType)
		for i, d := range e.Tensor.Shape() {
			if i > 0 {
				hdr.WriteByte(',')
			}
			fmt.Fprintf(&hdr, "%d", d)
		}
		fmt.Fprintf(&hdr, `],"data_offsets":[%d,%d]}`, offset, offset+n)
		offset += n
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	return hdr.Bytes()
}

// encodeMetadata appends the "__metadata__" member, its keys sorted.
func encodeMetadata(hdr *bytes.Buffer, metadata map[string]string) {
	hdr.WriteString(`"__metadata__":{`)
	keys := make([]string, 0, len(metadata))
	for k := range metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			hdr.WriteByte(',')
		}
		writeJSONString(hdr, k)
		hdr.WriteByte(':')
		writeJSONString(hdr, metadata[k])
	}
	hdr.WriteByte('}')
}

// writeData writes the tensors' values in order.
func writeData(w io.Writer, sorted []Entry) error {
	buf := make([]byte, 0, 64<<10)
	for _, e := range sorted {
		var err error
		buf, err = encodeChunks(buf, e, func(b []byte) error {
			if _, err := w.Write(b); err != nil {
				return fmt.Errorf("writing tensor %q: %w", e.Name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// encodeChunks passes e's values, encoded as the file stores them, to emit
// in chunks, so that a large tensor needs only the small buffer buf (which
// it returns, maybe grown); float32 data on a little-endian host is passed
// as it is, in one piece.
func encodeChunks(buf []byte, e Entry, emit func([]byte) error) ([]byte, error) {
	data := e.Tensor.Data()
	if e.DType == F32 && nativeLittleEndian {
		return buf, emit(float32Bytes(data))
	}
	for start := 0; start < len(data); {
		end := min(start+cap(buf)/8, len(data))
		var err error
		if buf, err = encodeValues(buf[:0], e, data[start:end]); err != nil {
			return buf, err
		}
		if err := emit(buf); err != nil {
			return buf, err
		}
		start = end
	}
	return buf, nil
}

// checksums returns the ChecksumKey value for the tensors: the JSON object
// of each one's CRC-32C, over the bytes writeData writes.
func checksums(sorted []Entry) (string, error) {
	sums := make(map[string]string, len(sorted))
	buf := make([]byte, 0, 64<<10)
	for _, e := range sorted {
		var crc uint32
		var err error
		buf, err = encodeChunks(buf, e, func(b []byte) error {
			crc = crc32.Update(crc, castagnoli, b)
			return nil
		})
		if err != nil {
			return "", err
		}
		sums[e.Name] = fmt.Sprintf("%08x", crc)
	}
	js, err := json.Marshal(sums)
	if err != nil {
		panic("checkpoint: encoding a map of strings failed: " + err.Error())
	}
	return string(js), nil
}

// encodeValues appends values, of entry e, little-endian in e's dtype;
// an I64 value must be a whole number.
func encodeValues(buf []byte, e Entry, values []float32) ([]byte, error) {
	for _, v := range values {
		if e.DType == I64 {
			if v != float32(math.Trunc(float64(v))) {
				return nil, fmt.Errorf("tensor %q: value %v is not an integer (dtype I64)", e.Name, v)
			}
			buf = binary.LittleEndian.AppendUint64(buf, uint64(int64(v)))
		} else {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
	}
	return buf, nil
}

// writeJSONString appends s as a JSON string without HTML escaping, as
// serde_json does.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes; writes to a Buffer never fail
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

// ReadTensors decodes a whole safetensors file held in data. Entries are
// returned in data order, converted to float32. Checksums under
// ChecksumKey are verified when the file has them; a NaN or infinity in a
// float tensor is an error wrapping ErrNonFinite unless AllowNonFinite is
// given.
func ReadTensors(data []byte, opts ...Option) ([]Entry, map[string]string, error) {
	return readNamed("", bytes.NewReader(data), int64(len(data)), newReadConfig(opts))
}

// ReadTensorsFile reads the safetensors file at path, checked as
// ReadTensors checks. Errors name the file and what is wrong with it; a
// malformed file or a checksum that does not match wraps ErrCorrupt.
func ReadTensorsFile(path string, opts ...Option) ([]Entry, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	return readNamed(path, f, fi.Size(), newReadConfig(opts))
}

// readNamed decodes the file of the given size in r and makes every error
// name the file (name; "" for bytes without a name).
func readNamed(name string, r io.ReaderAt, size int64, cfg readConfig) ([]Entry, map[string]string, error) {
	entries, meta, err := decode(r, size, cfg)
	if err == nil {
		return entries, meta, nil
	}
	switch e := err.(type) {
	case *FormatError:
		e.File = name
		return nil, nil, e
	case *nonFiniteError:
		e.file = name
		return nil, nil, e
	}
	if name == "" {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	return nil, nil, fmt.Errorf("checkpoint: %s: %w", name, err)
}

func corrupt(format string, args ...any) error {
	return &FormatError{Reason: fmt.Sprintf(format, args...)}
}

// decode reads a safetensors file of the given size from r.
func decode(r io.ReaderAt, size int64, cfg readConfig) ([]Entry, map[string]string, error) {
	if size < 8 {
		return nil, nil, corrupt("file is %d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, nil, fmt.Errorf("reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, nil, corrupt("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, nil, corrupt("header length %d exceeds the %d bytes after the length field (truncated file?)", n, size-8)
	}
	hdrBytes := make([]byte, n)
	if _, err := r.ReadAt(hdrBytes, 8); err != nil && n > 0 {
		return nil, nil, fmt.Errorf("reading header: %w", err)
	}
	h, err := parseHeader(hdrBytes, size-8-int64(n))
	if err != nil {
		return nil, nil, err
	}
	sums, err := h.checksums()
	if err != nil {
		return nil, nil, err
	}
	base := 8 + int64(n)
	entries := make([]Entry, len(h.names))
	var raw []byte
	for i, name := range h.names {
		info := h.infos[i]
		span := info.DataOffsets[1] - info.DataOffsets[0]
		shape := make([]int, len(info.Shape))
		for j, d := range info.Shape {
			shape[j] = int(d)
		}
		var values []float32
		var stored []byte // the tensor's bytes as the file holds them
		if info.DType == F32 && nativeLittleEndian {
			// Read straight into the tensor's storage.
			values = make([]float32, span/4)
			stored = float32Bytes(values)
			if _, err := r.ReadAt(stored, base+info.DataOffsets[0]); err != nil && span > 0 {
				return nil, nil, fmt.Errorf("reading tensor %q: %w", name, err)
			}
		} else {
			raw = slices.Grow(raw[:0], int(span))[:span]
			if _, err := r.ReadAt(raw, base+info.DataOffsets[0]); err != nil && span > 0 {
				return nil, nil, fmt.Errorf("reading tensor %q: %w", name, err)
			}
			stored = raw
		}
		if sums != nil {
			if got := crc32.Checksum(stored, castagnoli); got != sums[name] {
				return nil, nil, corrupt("tensor %q: checksum mismatch: the data's CRC-32C is %08x, the header's %s records %08x", name, got, ChecksumKey, sums[name])
			}
		}
		if values == nil {
			values = toFloat32(raw, info.DType)
		}
		if !cfg.allowNonFinite && info.DType.isFloat() {
			if k, v, bad := firstNonFinite(values); bad {
				return nil, nil, &nonFiniteError{tensor: name, index: k, value: v}
			}
		}
		entries[i] = Entry{Name: name, DType: info.DType, Tensor: tensor.New(values, shape...)}
	}
	return entries, h.metadata, nil
}

// checksums parses the ChecksumKey metadata, which must hold one CRC for
// each tensor and no other; it returns nil for a file without the key.
func (h *header) checksums() (map[string]uint32, error) {
	js, ok := h.metadata[ChecksumKey]
	if !ok {
		return nil, nil
	}
	var hexSums map[string]string
	if err := json.Unmarshal([]byte(js), &hexSums); err != nil {
		return nil, corrupt("metadata %s is not a JSON object of strings: %v", ChecksumKey, err)
	}
	sums := make(map[string]uint32, len(hexSums))
	for name, hx := range hexSums {
		v, err := strconv.ParseUint(hx, 16, 32)
		if err != nil || len(hx) != 8 {
			return nil, corrupt("metadata %s: tensor %q: checksum %q is not 8 hex digits", ChecksumKey, name, hx)
		}
		sums[name] = uint32(v)
	}
	for _, name := range h.names {
		if _, ok := sums[name]; !ok {
			return nil, corrupt("tensor %q has no checksum in metadata %s", name, ChecksumKey)
		}
	}
	if len(sums) != len(h.names) {
		for name := range sums {
			if !slices.Contains(h.names, name) {
				return nil, corrupt("metadata %s has a checksum for tensor %q, which the file does not hold", ChecksumKey, name)
			}
		}
	}
	return sums, nil
}

// firstNonFinite returns the index and value of the first NaN or infinity
// in values.
func firstNonFinite(values []float32) (int, float32, bool) {
	for i, v := range values {
		// v-v is NaN exactly when v is NaN or ±Inf; one branch per value.
		if v-v != 0 {
			return i, v, true
		}
	}
	return 0, 0, false
}

// parseHeader parses and validates a header whose data section holds
// dataLen bytes: the JSON must be one object of tensor entries and an
// optional "__metadata__" object of strings, with no duplicate keys; every
// dtype known; shape product × dtype size equal to the offsets' span; and
// the spans, sorted by offset, must tile the data section exactly.
func parseHeader(b []byte, dataLen int64) (*header, error) {
	h, err := decodeHeaderJSON(b)
	if err != nil {
		return nil, err
	}
	h.dataLen = dataLen
	for i, info := range h.infos {
		if err := checkTensorInfo(h.names[i], info, dataLen); err != nil {
			return nil, err
		}
	}
	h.sortByOffset()
	if err := h.checkTiling(); err != nil {
		return nil, err
	}
	return h, nil
}

// decodeHeaderJSON reads the header's JSON object: tensor entries, in the
// file's order, and the optional "__metadata__", refusing duplicate keys,
// unknown entry fields and anything but padding spaces after the object.
func decodeHeaderJSON(b []byte) (*header, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, corrupt("header is not a JSON object")
	}
	h := &header{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, corrupt("header is not valid JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, corrupt("header is not valid JSON: key %v", tok)
		}
		if seen[key] {
			return nil, corrupt("duplicate header key %q", key)
		}
		seen[key] = true
		if key == "__metadata__" {
			if err := dec.Decode(&h.metadata); err != nil {
				return nil, corrupt("__metadata__ is not an object of strings: %v", err)
			}
			continue
		}
		info, err := decodeTensorInfo(dec, key)
		if err != nil {
			return nil, err
		}
		h.names = append(h.names, key)
		h.infos = append(h.infos, info)
	}
	if _, err := dec.Token(); err != nil {
		return nil, corrupt("header is not valid JSON: %v", err)
	}
	// Only the padding spaces may follow the object.
	if len(bytes.TrimRight(b[dec.InputOffset():], " ")) != 0 {
		return nil, corrupt("trailing bytes after the header object")
	}
	return h, nil
}

// decodeTensorInfo reads the value of tensor key from dec, refusing
// fields a safetensors entry does not have.
func decodeTensorInfo(dec *json.Decoder, key string) (tensorInfo, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return tensorInfo{}, corrupt("header is not valid JSON: %v", err)
	}
	var info tensorInfo
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(&info); err != nil {
		return tensorInfo{}, corrupt("tensor %q: invalid entry: %v", key, err)
	}
	return info, nil
}

// checkTensorInfo validates one entry on its own: a known dtype, a shape,
// offsets inside the data section spanning exactly the shape's bytes.
func checkTensorInfo(name string, info tensorInfo, dataLen int64) error {
	size := info.DType.Size()
	if size == 0 {
		return corrupt("tensor %q: unknown dtype %q", name, info.DType)
	}
	if info.Shape == nil {
		return corrupt("tensor %q: missing shape", name)
	}
	if len(info.DataOffsets) != 2 {
		return corrupt("tensor %q: data_offsets must be [begin, end], got %v", name, info.DataOffsets)
	}
	numel, err := shapeNumel(name, info.Shape)
	if err != nil {
		return err
	}
	b, e := info.DataOffsets[0], info.DataOffsets[1]
	if b < 0 || e < b || e > dataLen {
		return corrupt("tensor %q: data_offsets [%d, %d] out of range of the %d-byte data section", name, b, e, dataLen)
	}
	if numel*int64(size) != e-b {
		return corrupt("tensor %q: shape %v of %s needs %d bytes but data_offsets [%d, %d] span %d", name, info.Shape, info.DType, numel*int64(size), b, e, e-b)
	}
	return nil
}

// shapeNumel returns the element count of tensor name's shape, refusing
// negative dimensions and counts past 2^60.
func shapeNumel(name string, shape []int64) (int64, error) {
	numel := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, corrupt("tensor %q: negative dimension in shape %v", name, shape)
		}
		if d != 0 && numel > (1<<60)/d {
			return 0, corrupt("tensor %q: shape %v overflows", name, shape)
		}
		numel *= d
	}
	return numel, nil
}

// sortByOffset puts the entries in data order: the file may list keys in
// any order.
func (h *header) sortByOffset() {
	idx := make([]int, len(h.names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		oa, ob := h.infos[a].DataOffsets, h.infos[b].DataOffsets
		if oa[0] != ob[0] {
			return cmpInt64(oa[0], ob[0])
		}
		return cmpInt64(oa[1], ob[1])
	})
	names := make([]string, len(idx))
	infos := make([]tensorInfo, len(idx))
	for k, i := range idx {
		names[k], infos[k] = h.names[i], h.infos[i]
	}
	h.names, h.infos = names, infos
}

// checkTiling requires the spans of entries in data order to tile the
// data section with no gap or overlap.
func (h *header) checkTiling() error {
	var end int64
	for k, info := range h.infos {
		off := info.DataOffsets
		if off[0] != end {
			if off[0] < end {
				return corrupt("tensor %q: data_offsets [%d, %d] overlap the previous tensor %q ending at %d", h.names[k], off[0], off[1], h.names[k-1], end)
			}
			return corrupt("tensor %q: data_offsets [%d, %d] leave a gap after byte %d", h.names[k], off[0], off[1], end)
		}
		end = off[1]
	}
	if end != h.dataLen {
		return corrupt("tensors cover %d bytes but the data section has %d", end, h.dataLen)
	}
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// toFloat32 converts little-endian raw values of dtype d to float32.
func toFloat32(raw []byte, d DType) []float32 {
	n := len(raw) / d.Size()
	out := make([]float32, n)
	le := binary.LittleEndian
	for i := range out {
		switch d {
		case F32:
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		case F64:
			out[i] = float32(math.Float64frombits(le.Uint64(raw[8*i:])))
		case I64:
			out[i] = float32(int64(le.Uint64(raw[8*i:])))
		case I32:
			out[i] = float32(int32(le.Uint32(raw[4*i:])))
		case F16:
			out[i] = halfToFloat32(le.Uint16(raw[2*i:]))
		case BF16:
			out[i] = math.Float32frombits(uint32(le.Uint16(raw[2*i:])) << 16)
		}
	}
	return out
}

// halfToFloat32 converts an IEEE 754 binary16 value exactly.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant × 2^-24
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
