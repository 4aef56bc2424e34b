package mnist

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrMalformed is wrapped by the errors for a data file that is not a
// well-formed MNIST IDX file (bad magic, dimensions or sizes, truncated,
// trailing bytes, corrupt gzip).
var ErrMalformed = errors.New("mnist: malformed IDX file")

const (
	idxUnsignedByte = 0x08
	// initialRead caps the first allocation for a file's payload, so a
	// header claiming absurd dimensions costs only the bytes really present.
	initialRead = 64 << 20
	// maxPayload bounds the product of the dimensions so it cannot overflow.
	maxPayload = 1 << 40
)

// readIDX decodes an IDX file of unsigned bytes with the given number of
// dimensions, gzipped or not (detected from its first bytes). name names
// the file in errors.
func readIDX(r io.Reader, name string, wantDims int) (dims []int, payload []byte, err error) {
	malformed := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrMalformed, name, fmt.Sprintf(format, args...))
	}
	br := bufio.NewReaderSize(r, 64<<10)
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("%w %s: corrupt gzip: %w", ErrMalformed, name, err)
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	// Read errors inside a gzip stream are corruption, not I/O trouble.
	readErr := func(what string, got, want int64, err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return malformed("truncated: %s has %d of %d bytes", what, got, want)
		}
		return fmt.Errorf("%w %s: reading %s: %w", ErrMalformed, name, what, err)
	}

	var magic [4]byte
	if n, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, nil, readErr("magic number", int64(n), 4, err)
	}
	if magic[0] != 0 || magic[1] != 0 || magic[2] != idxUnsignedByte || int(magic[3]) != wantDims {
		return nil, nil, malformed("magic number %#08x, want %#08x (unsigned bytes, %d dimensions)",
			binary.BigEndian.Uint32(magic[:]), idxUnsignedByte<<8|wantDims, wantDims)
	}
	header := make([]byte, 4*wantDims)
	if n, err := io.ReadFull(r, header); err != nil {
		return nil, nil, readErr("dimension header", int64(n), int64(len(header)), err)
	}
	size := int64(1)
	dims = make([]int, wantDims)
	for i := range dims {
		d := binary.BigEndian.Uint32(header[4*i:])
		dims[i] = int(d)
		if d != 0 && size > maxPayload/int64(d) {
			return nil, nil, malformed("dimensions %v are implausibly large", dims[:i+1])
		}
		size *= int64(d)
	}

	payload, got, err := readAtMost(r, size)
	if err != nil {
		return nil, nil, readErr("data", got, size, err)
	}
	// Reading to the end also makes gzip verify its checksum.
	var one [1]byte
	if n, err := io.ReadFull(r, one[:]); n > 0 {
		// Drain to the end: in a gzip stream, corruption that lengthened
		// the output shows up as a checksum or deflate error there.
		extra, err := io.Copy(io.Discard, r)
		if err != nil {
			return nil, nil, fmt.Errorf("%w %s: after the data: %w", ErrMalformed, name, err)
		}
		return nil, nil, malformed("%d trailing bytes after %d bytes of data", extra+1, size)
	} else if !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("%w %s: after the data: %w", ErrMalformed, name, err)
	}
	return dims, payload, nil
}

// readAtMost reads exactly size bytes, growing its buffer as data arrives
// rather than trusting size up front. It returns how many bytes it got.
func readAtMost(r io.Reader, size int64) ([]byte, int64, error) {
	buf := make([]byte, 0, min(size, initialRead))
	for int64(len(buf)) < size {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(size, 2*int64(cap(buf))))
			copy(grown, buf)
			buf = grown
		}
		n, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return nil, int64(len(buf)), err
		}
	}
	return buf, size, nil
}
