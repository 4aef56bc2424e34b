package transport

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the fixed size of an encoded frame header in bytes.
const HeaderSize = 40

// MaxPayload bounds a frame's payload. A header announcing more is
// malformed, so a peer can never make a reader allocate or read past it.
// Senders split larger messages into several frames.
const MaxPayload = 8 << 20

// Frame header layout (little endian), 40 bytes:
//
//	0  magic   uint16 'g' 't'
//	2  version uint8  WireVersion
//	3  kind    uint8  Kind
//	4  op      uint8  collective operation (opaque to the transport)
//	5  dtype   uint8  element type (opaque to the transport)
//	6  redop   uint8  reduce operation (opaque to the transport)
//	7  flags   uint8  FlagShm | slot<<ShmSlotBits, or zero
//	8  root    int32  root rank of the operation, or -1
//	12 length  uint32 payload bytes that follow the header
//	16 seq     uint64 sequence number of the operation in its group
//	24 count   uint64 element count of the whole operation
//	32 tag     int64  point-to-point tag; 0 for collectives
const (
	magic0 = 'g'
	magic1 = 't'
	// WireVersion is the frame format version; a frame with another
	// version is malformed. Version 2 added heartbeat frames.
	WireVersion = 2
)

// Kind says what a frame carries.
type Kind uint8

// Frame kinds.
const (
	// KindCollective frames carry a part of a collective operation. They
	// are delivered in order to the receives posted with Pair.Post.
	KindCollective Kind = iota + 1
	// KindP2P frames carry a part of a point-to-point message, matched to
	// receives by tag.
	KindP2P
	// KindAbort frames carry a UTF-8 reason why the sender gave up on the
	// group; the receiver fails every pending operation with it.
	KindAbort
	// KindHeartbeat frames carry nothing: a sender whose connection has
	// been idle for a while sends one, so that the receiver can tell a
	// live, quiet peer from a frozen or unreachable one.
	KindHeartbeat
	kindEnd
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindCollective:
		return "collective"
	case KindP2P:
		return "p2p"
	case KindAbort:
		return "abort"
	case KindHeartbeat:
		return "heartbeat"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// FlagShm marks a frame whose payload is not on the wire but in a slot
// of the pair's shared-memory ring (same-host peers); the slot's index is
// in the flag bits ShmSlotMask, and Length is still the payload's size.
const (
	FlagShm     = 1
	ShmSlotMask = 0xf0
	ShmSlotBits = 4 // shift of the slot index within the flags
)

// Header describes one frame. Op, DType, RedOp, Root, Seq, Count and Tag
// are the operation's identity: every frame of an operation carries them,
// so a receiver detects a peer that issued a different operation from the
// first frame it gets, with no extra round trip.
type Header struct {
	Kind   Kind
	Op     uint8
	DType  uint8
	RedOp  uint8
	Flags  uint8
	Root   int32
	Length uint32
	Seq    uint64
	Count  uint64
	Tag    int64
}

// SameOp reports whether h and o describe the same operation: every field
// but Length and Flags.
func (h *Header) SameOp(o *Header) bool {
	return h.Kind == o.Kind && h.Op == o.Op && h.DType == o.DType && h.RedOp == o.RedOp &&
		h.Root == o.Root && h.Seq == o.Seq && h.Count == o.Count && h.Tag == o.Tag
}

// Encode writes h into b, which must hold HeaderSize bytes.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	b[0], b[1], b[2] = magic0, magic1, WireVersion
	b[3] = byte(h.Kind)
	b[4], b[5], b[6], b[7] = h.Op, h.DType, h.RedOp, h.Flags
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Root))
	binary.LittleEndian.PutUint32(b[12:], h.Length)
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
	binary.LittleEndian.PutUint64(b[24:], h.Count)
	binary.LittleEndian.PutUint64(b[32:], uint64(h.Tag))
}

// Decode parses a header from b and validates it: magic, version, kind,
// reserved bits and the payload bound. It never allocates except for the
// returned error.
func Decode(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes, want %d", ErrMalformed, len(b), HeaderSize)
	}
	if b[0] != magic0 || b[1] != magic1 {
		return Header{}, fmt.Errorf("%w: bad magic %#02x%02x", ErrMalformed, b[0], b[1])
	}
	if b[2] != WireVersion {
		return Header{}, fmt.Errorf("%w: frame version %d, want %d", ErrMalformed, b[2], WireVersion)
	}
	h := Header{
		Kind:   Kind(b[3]),
		Op:     b[4],
		DType:  b[5],
		RedOp:  b[6],
		Flags:  b[7],
		Root:   int32(binary.LittleEndian.Uint32(b[8:])),
		Length: binary.LittleEndian.Uint32(b[12:]),
		Seq:    binary.LittleEndian.Uint64(b[16:]),
		Count:  binary.LittleEndian.Uint64(b[24:]),
		Tag:    int64(binary.LittleEndian.Uint64(b[32:])),
	}
	if h.Kind == 0 || h.Kind >= kindEnd {
		return Header{}, fmt.Errorf("%w: unknown frame kind %d", ErrMalformed, b[3])
	}
	if b[7]&^(FlagShm|ShmSlotMask) != 0 || b[7]&FlagShm == 0 && b[7] != 0 {
		return Header{}, fmt.Errorf("%w: reserved flags %#x set", ErrMalformed, b[7])
	}
	if h.Length > MaxPayload {
		return Header{}, fmt.Errorf("%w: payload of %d bytes exceeds the %d-byte bound", ErrMalformed, h.Length, MaxPayload)
	}
	return h, nil
}
