package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
)

// The TCP store speaks length-prefixed frames after the dist/auth
// handshake. Every frame is
//
//	u32 length of the rest | u64 request id | u8 op (request) or status (response) | body
//
// Requests carry an id chosen by the client; the response to a request
// carries the same id, so one connection multiplexes any number of calls,
// including blocking Gets, in any order. Byte strings in bodies are a u32
// length followed by the bytes; integers are big endian.
//
// Request bodies:            Response bodies (statusOK):
//
//	set     key value          -
//	get     key                value
//	add     key i64            i64
//	cas     key exp desired    u8 present, value
//	wait    u32 n, n keys      -
//	delete  key                u8 existed
//	numkeys -                  i64
//	cancel  -                  (none: cancels the blocking request with this id)
//
// A response with statusErr carries the error text instead.

// MaxFrameSize bounds a TCP store frame: two values (compare-and-set) plus
// keys and headers. A longer length prefix closes the connection before
// anything is allocated.
const MaxFrameSize = 2*MaxValueSize + 64<<10

const frameHeader = 4 + 8 + 1

// Request ops.
const (
	opSet byte = 1 + iota
	opGet
	opAdd
	opCAS
	opWait
	opDelete
	opNumKeys
	opCancel
)

// Response statuses.
const (
	statusOK byte = iota
	statusErr
)

var errMalformed = errors.New("store: malformed frame")

// frame is a decoded frame: id, op or status, and body (which aliases the
// read buffer).
type frame struct {
	id   uint64
	code byte
	body []byte
}

// readFrame reads one frame of at most max bytes into a new buffer, which
// the returned frame's body aliases.
func readFrame(r *bufio.Reader, max int) (frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	if n < frameHeader-4 || n > int64(max) {
		return frame{}, fmt.Errorf("%w: length %d outside %d..%d", errMalformed, n, frameHeader-4, max)
	}
	// Up to 4 MiB is read in one piece; a larger frame grows its buffer as
	// bytes arrive, so a peer that announces a big frame and sends little
	// makes us allocate only about what it actually sent.
	b := make([]byte, min(n, 4<<20))
	if _, err := io.ReadFull(r, b); err != nil {
		return frame{}, noEOF(err)
	}
	for int64(len(b)) < n {
		have := len(b)
		b = slices.Grow(b, int(min(n-int64(have), int64(have))))
		b = b[:cap(b)]
		if int64(len(b)) > n {
			b = b[:n]
		}
		if _, err := io.ReadFull(r, b[have:]); err != nil {
			return frame{}, noEOF(err)
		}
	}
	return frame{id: binary.BigEndian.Uint64(b), code: b[8], body: b[9:]}, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// encoder builds one frame. A large value may be kept as the frame's tail
// and written straight from the caller's slice (writev), not copied.
type encoder struct {
	b    []byte
	tail []byte
}

func newFrame(id uint64, code byte, sizeHint int) *encoder {
	e := &encoder{b: make([]byte, 4, frameHeader+sizeHint)}
	e.b = binary.BigEndian.AppendUint64(e.b, id)
	e.b = append(e.b, code)
	return e
}

func (e *encoder) bytes(v []byte) *encoder {
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(v)))
	e.b = append(e.b, v...)
	return e
}

// tailBytes encodes v like bytes, as the last field. A large v is not
// copied; a small one is, since one buffer makes one TCP segment.
func (e *encoder) tailBytes(v []byte) *encoder {
	if len(v) < 64<<10 {
		return e.bytes(v)
	}
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(v)))
	e.tail = v
	return e
}

func (e *encoder) str(s string) *encoder {
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(s)))
	e.b = append(e.b, s...)
	return e
}

func (e *encoder) i64(v int64) *encoder {
	e.b = binary.BigEndian.AppendUint64(e.b, uint64(v))
	return e
}

func (e *encoder) u8(v byte) *encoder {
	e.b = append(e.b, v)
	return e
}

// buffers fills in the length prefix and returns the frame as the pieces
// to write.
func (e *encoder) buffers() net.Buffers {
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4+len(e.tail)))
	if len(e.tail) == 0 {
		return net.Buffers{e.b}
	}
	return net.Buffers{e.b, e.tail}
}

// finish returns the frame as one slice.
func (e *encoder) finish() []byte {
	bufs := e.buffers()
	if len(bufs) == 1 {
		return bufs[0]
	}
	return append(bufs[0], bufs[1]...)
}

// decoder reads a body; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: field of %d bytes, %d left", errMalformed, n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) i64() int64 {
	if v := d.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (d *decoder) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) key() string {
	n := d.u32()
	if d.err == nil && n > MaxKeySize {
		d.err = fmt.Errorf("%w: key of %d bytes exceeds %d", errMalformed, n, MaxKeySize)
	}
	return string(d.take(uint64(n)))
}

func (d *decoder) value() []byte {
	n := d.u32()
	if d.err == nil && n > MaxValueSize {
		d.err = fmt.Errorf("%w: value of %d bytes exceeds %d", errMalformed, n, MaxValueSize)
	}
	return d.take(uint64(n))
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errMalformed, len(d.b))
	}
	return d.err
}

// request is a decoded request.
type request struct {
	id                       uint64
	op                       byte
	key                      string
	value, expected, desired []byte
	delta                    int64
	keys                     []string
}

func decodeRequest(f frame) (request, error) {
	r := request{id: f.id, op: f.code}
	d := &decoder{b: f.body}
	switch f.code {
	case opSet:
		r.key, r.value = d.key(), d.value()
	case opGet, opDelete:
		r.key = d.key()
	case opAdd:
		r.key, r.delta = d.key(), d.i64()
	case opCAS:
		r.key, r.expected, r.desired = d.key(), d.value(), d.value()
	case opWait:
		n := d.u32()
		// Each key takes at least its 4-byte length, which bounds n by the
		// frame actually received.
		if uint64(n) > uint64(len(d.b))/4 {
			return r, fmt.Errorf("%w: wait for %d keys in %d bytes", errMalformed, n, len(d.b))
		}
		r.keys = make([]string, n)
		for i := range r.keys {
			r.keys[i] = d.key()
		}
	case opNumKeys, opCancel:
	default:
		return r, fmt.Errorf("%w: unknown op %d", errMalformed, f.code)
	}
	return r, d.finish()
}

// encodeRequest is decodeRequest's inverse. The request's value (or, for
// compare-and-set, desired value) is not copied.
func encodeRequest(r request) *encoder {
	e := newFrame(r.id, r.op, len(r.key)+len(r.expected)+16)
	switch r.op {
	case opSet:
		e.str(r.key).tailBytes(r.value)
	case opGet, opDelete:
		e.str(r.key)
	case opAdd:
		e.str(r.key).i64(r.delta)
	case opCAS:
		e.str(r.key).bytes(r.expected).tailBytes(r.desired)
	case opWait:
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(r.keys)))
		for _, k := range r.keys {
			e.str(k)
		}
	}
	return e
}
