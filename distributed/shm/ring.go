package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Same-host peers move large payloads through shared memory instead of
// the socket: the sender copies a payload into the next slot of a ring in
// a file under /dev/shm that both processes map, and sends only the frame
// header (with transport.FlagShm) over TCP; the receiver reduces or copies
// straight out of the slot and then bumps a shared "consumed" counter that
// frees the slot. One copy instead of the kernel's two, and no socket
// buffer in between. Headers stay on the TCP connection, so ordering,
// mismatch detection and failure handling are unchanged, and a dead peer
// is still seen as EOF.
const (
	// RingSlots is the number of slots in each direction of a Ring; a
	// slot's index fits the frame header's flag bits.
	RingSlots = 8
	// SlotSize is the largest payload a slot holds.
	SlotSize = 1 << 20
	// RingMinPayload is the smallest payload worth a slot; smaller ones
	// go inline.
	RingMinPayload = 32 << 10
	// ringHeader holds the two directions' consumed counters, each on its
	// own cache line.
	ringHeader = 128
	ringSize   = ringHeader + 2*RingSlots*SlotSize
)

// Ring is one pair's shared ring: out is written by this rank, in by the
// peer. The writer side (WaitSlot, Take) is used by one writer at a time,
// the reader side (In, Release) by the pair's one reader.
type Ring struct {
	mem       []byte
	out, in   [][]byte
	consumed  *uint64 // slots of out the peer has consumed
	ack       *uint64 // slots of in this rank has consumed (published)
	produced  uint64  // slots of out written; writer-owned
	next      int     // slot of out to write next; writer-owned
	consumed0 uint64  // reader-owned count of slots of in consumed
}

func newRing(mem []byte, lower bool) *Ring {
	l := &Ring{mem: mem}
	c0 := (*uint64)(unsafe.Pointer(&mem[0]))
	c1 := (*uint64)(unsafe.Pointer(&mem[64]))
	slots := func(dir int) [][]byte {
		s := make([][]byte, RingSlots)
		for i := range s {
			off := ringHeader + (dir*RingSlots+i)*SlotSize
			s[i] = mem[off : off+SlotSize : off+SlotSize]
		}
		return s
	}
	// Direction 0 is lower→higher; counter i counts consumption of
	// direction i.
	if lower {
		l.out, l.in, l.consumed, l.ack = slots(0), slots(1), c0, c1
	} else {
		l.out, l.in, l.consumed, l.ack = slots(1), slots(0), c1, c0
	}
	return l
}

// WaitSlot waits until the peer has freed a slot of out, or failed is
// closed (it then returns an error), or ctx ends. It polls the shared
// counter: it only waits when the sender is a whole ring ahead of the
// receiver, and then the receiver's pace decides anyway.
func (l *Ring) WaitSlot(ctx context.Context, failed <-chan struct{}) error {
	for spins := 0; atomic.LoadUint64(l.consumed)+RingSlots <= l.produced; spins++ {
		if spins < 50 {
			runtime.Gosched()
			continue
		}
		select {
		case <-failed:
			return errors.New("mesh failed")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Microsecond):
		}
	}
	return nil
}

// Take returns the slot of out to fill next and its index, which the
// frame header carries to the peer. Slots are used in ring order, but when
// the peer has consumed everything the ring starts over at slot 0:
// back-to-back operations then reuse the same, cache-warm slots instead of
// sweeping the whole ring. The caller has waited for a free slot
// (WaitSlot).
func (l *Ring) Take() (int, []byte) {
	if atomic.LoadUint64(l.consumed) == l.produced {
		l.next = 0
	}
	s := l.next
	l.next = (l.next + 1) % RingSlots
	l.produced++
	return s, l.out[s]
}

// In returns slot of in, which holds the payload of the peer's frame that
// named it. slot must be below RingSlots.
func (l *Ring) In(slot int) []byte { return l.in[slot] }

// Release frees for the peer the slot of in just read: slots are read in
// the order the peer filled them.
func (l *Ring) Release() {
	l.consumed0++
	atomic.StoreUint64(l.ack, l.consumed0)
}

// Unmap releases the ring's memory; nil is a no-op. No slot may be in use.
func (l *Ring) Unmap() {
	if l != nil {
		Unmap(l.mem)
		l.mem = nil
	}
}

// OfferRing is the lower rank's side of setting up a pair's ring over the
// pair's connection rw, before anything else is read from it. If create
// is true it makes a ring file and offers its path (else it offers none,
// an empty path); the peer answers whether it mapped it (AnswerRing).
// Either side falling back leaves the pair on plain TCP: OfferRing then
// returns nil, nil. The file is unlinked as soon as both have mapped it,
// so nothing is left behind even if a process is killed later.
func OfferRing(rw io.ReadWriter, create bool) (*Ring, error) {
	var path string
	var mem []byte
	if create {
		path, mem = createRing()
	}
	defer func() {
		if path != "" {
			os.Remove(path)
		}
	}()
	if err := writeString(rw, path); err != nil {
		Unmap(mem)
		return nil, err
	}
	var ok [1]byte
	if _, err := io.ReadFull(rw, ok[:]); err != nil {
		Unmap(mem)
		return nil, err
	}
	if ok[0] != 1 || mem == nil {
		Unmap(mem)
		return nil, nil
	}
	return newRing(mem, true), nil
}

// AnswerRing is the higher rank's side of OfferRing: it reads the offer
// from rw, maps the offered file if open is true, and answers whether it
// did. It returns nil, nil when the pair stays on plain TCP.
func AnswerRing(rw io.ReadWriter, open bool) (*Ring, error) {
	path, err := readString(rw)
	if err != nil {
		return nil, err
	}
	var mem []byte
	if path != "" && open {
		mem = openRing(path)
	}
	ok := []byte{0}
	if mem != nil {
		ok[0] = 1
	}
	if _, err := rw.Write(ok); err != nil {
		Unmap(mem)
		return nil, err
	}
	if mem == nil {
		return nil, nil
	}
	return newRing(mem, false), nil
}

func createRing() (string, []byte) {
	path, mem, err := Create("ring", ringSize)
	if err != nil {
		return "", nil // the pair stays on TCP
	}
	return path, mem
}

func openRing(path string) []byte {
	mem, _ := Open(path, ringSize) // nil: the pair stays on TCP
	return mem
}

func writeString(w io.Writer, s string) error {
	b := make([]byte, 2+len(s))
	binary.LittleEndian.PutUint16(b, uint16(len(s)))
	copy(b[2:], s)
	_, err := w.Write(b)
	return err
}

func readString(r io.Reader) (string, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	l := binary.LittleEndian.Uint16(n[:])
	if l > 4096 {
		return "", fmt.Errorf("shm path of %d bytes", l)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}
