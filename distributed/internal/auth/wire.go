package auth

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// MaxMessageSize bounds every handshake message (type byte and body); a
// longer length prefix is refused before anything is allocated.
const MaxMessageSize = 1024

// magic opens the client's first message, so a stray non-gotrain peer (a
// port scanner, an HTTP probe) gets a clear error.
var magic = [4]byte{'G', 'T', 'R', 'N'}

// Message types.
const (
	msgClientHello byte = 1 + iota
	msgChallenge
	msgProof
	msgResult
)

// Statuses in challenge and result messages.
const (
	statusOK byte = iota
	statusVersion
	statusAuth
	statusRejected
	// statusTLS: the server uses TLS and the client spoke plain TCP.
	statusTLS
)

type clientHello struct {
	version int
	nonce   [nonceSize]byte
}

type challenge struct {
	version int
	status  byte
	nonce   [nonceSize]byte
}

type proof struct {
	mac        [macSize]byte
	hello      Hello
	helloBytes []byte // the Hello as sent, which the MAC covers
}

type result struct {
	status     byte
	mac        [macSize]byte
	hello      Hello
	helloBytes []byte
	reason     string
}

// writeMsg sends msg (type byte first) with its 2-byte length prefix.
func writeMsg(w io.Writer, msg []byte) error {
	if len(msg) == 0 || len(msg) > MaxMessageSize {
		panic("auth: internal message size out of bounds")
	}
	frame := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(frame, uint16(len(msg)))
	copy(frame[2:], msg)
	_, err := w.Write(frame)
	return err
}

// readMsg reads one frame into buf (which must hold MaxMessageSize bytes)
// and returns the message.
func readMsg(r io.Reader, buf []byte) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	if hdr[0] == 0x16 && hdr[1] == 0x03 { // a TLS handshake record
		return nil, ErrTLSMismatch
	}
	n := int(binary.BigEndian.Uint16(hdr[:]))
	if n == 0 || n > MaxMessageSize {
		return nil, fmt.Errorf("%w: message length %d outside 1..%d (not a gotrain peer?)", ErrProtocol, n, MaxMessageSize)
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf[:n], nil
}

// decoder reads fields from a message; the first short read sticks in err.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = fmt.Errorf("%w: message truncated", ErrProtocol)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	v := d.take(1)
	if v == nil {
		return 0
	}
	return v[0]
}

func (d *decoder) u32() uint32 {
	v := d.take(4)
	if v == nil {
		return 0
	}
	return binary.BigEndian.Uint32(v)
}

func (d *decoder) i64() int64 {
	v := d.take(8)
	if v == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func (d *decoder) str8() string {
	n := int(d.byte())
	return string(d.take(n))
}

func (d *decoder) str16() string {
	v := d.take(2)
	if v == nil {
		return ""
	}
	return string(d.take(int(binary.BigEndian.Uint16(v))))
}

// finish reports a short read or trailing bytes.
func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrProtocol, len(d.b))
	}
	return d.err
}

func newDecoder(msg []byte, typ byte) *decoder {
	d := &decoder{b: msg}
	if t := d.byte(); d.err == nil && t != typ {
		d.err = fmt.Errorf("%w: message type %d, want %d", ErrProtocol, t, typ)
	}
	return d
}

func encodeHello(h Hello) ([]byte, error) {
	if h.Version < 0 || h.Version > math.MaxUint32 {
		return nil, fmt.Errorf("auth: Hello.Version %d out of range", h.Version)
	}
	if len(h.Role) > MaxJobIDLen || len(h.JobID) > MaxJobIDLen {
		return nil, fmt.Errorf("auth: Hello.Role or JobID longer than %d bytes", MaxJobIDLen)
	}
	b := make([]byte, 0, 4+2+len(h.Role)+len(h.JobID)+16)
	b = binary.BigEndian.AppendUint32(b, uint32(h.Version))
	b = append(b, byte(len(h.Role)))
	b = append(b, h.Role...)
	b = append(b, byte(len(h.JobID)))
	b = append(b, h.JobID...)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(h.Rank)))
	b = binary.BigEndian.AppendUint64(b, uint64(int64(h.WorldSize)))
	return b, nil
}

// decodeHello reads a Hello from d and returns the bytes it spanned.
func decodeHello(d *decoder) (Hello, []byte) {
	start := d.b
	var h Hello
	h.Version = int(d.u32())
	h.Role = d.str8()
	h.JobID = d.str8()
	rank, world := d.i64(), d.i64()
	if d.err != nil {
		return Hello{}, nil
	}
	if rank < math.MinInt32 || rank > math.MaxInt32 || world < math.MinInt32 || world > math.MaxInt32 {
		d.err = fmt.Errorf("%w: rank %d or world size %d out of range", ErrProtocol, rank, world)
		return Hello{}, nil
	}
	h.Rank, h.WorldSize = int(rank), int(world)
	raw := start[:len(start)-len(d.b)]
	return h, raw
}

func encodeClientHello(m clientHello) []byte {
	b := []byte{msgClientHello}
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(m.version))
	return append(b, m.nonce[:]...)
}

func decodeClientHello(msg []byte) (clientHello, error) {
	d := newDecoder(msg, msgClientHello)
	var m clientHello
	if mg := d.take(len(magic)); d.err == nil && [4]byte(mg) != magic {
		return m, fmt.Errorf("%w: bad magic %q (not a gotrain peer)", ErrProtocol, mg)
	}
	m.version = int(d.u32())
	copy(m.nonce[:], d.take(nonceSize))
	return m, d.finish()
}

func encodeChallenge(m challenge) []byte {
	b := []byte{msgChallenge}
	b = binary.BigEndian.AppendUint32(b, uint32(m.version))
	b = append(b, m.status)
	return append(b, m.nonce[:]...)
}

func decodeChallenge(msg []byte) (challenge, error) {
	d := newDecoder(msg, msgChallenge)
	var m challenge
	m.version = int(d.u32())
	m.status = d.byte()
	copy(m.nonce[:], d.take(nonceSize))
	return m, d.finish()
}

func encodeProof(mac []byte, hello []byte) []byte {
	b := []byte{msgProof}
	b = append(b, mac...)
	return append(b, hello...)
}

func decodeProof(msg []byte) (proof, error) {
	d := newDecoder(msg, msgProof)
	var m proof
	copy(m.mac[:], d.take(macSize))
	m.hello, m.helloBytes = decodeHello(d)
	return m, d.finish()
}

func encodeAccept(mac []byte, hello []byte) []byte {
	b := []byte{msgResult, statusOK}
	b = append(b, mac...)
	return append(b, hello...)
}

func encodeRefusal(status byte, reason string) []byte {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b := []byte{msgResult, status}
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

func decodeResult(msg []byte) (result, error) {
	d := newDecoder(msg, msgResult)
	var m result
	m.status = d.byte()
	if m.status == statusOK {
		copy(m.mac[:], d.take(macSize))
		m.hello, m.helloBytes = decodeHello(d)
	} else {
		m.reason = d.str16()
	}
	return m, d.finish()
}
