package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gotrain/gotrain/internal/shmfile"
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
	shmSlots    = 8
	shmSlotSize = 1 << 20
	// shmMin is the smallest payload worth a slot; smaller ones go inline.
	shmMin = 32 << 10
	// shmHeader holds the two directions' consumed counters, each on its
	// own cache line.
	shmHeader = 128
	shmSize   = shmHeader + 2*shmSlots*shmSlotSize
)

// shmLink is one pair's shared ring: out is written by this rank, in by
// the peer.
type shmLink struct {
	mem       []byte
	out, in   [][]byte
	consumed  *uint64 // slots of out the peer has consumed
	ack       *uint64 // slots of in this rank has consumed (published)
	produced  uint64  // slots of out written; guarded by the pair's wmu
	next      int     // slot of out to write next; guarded by the pair's wmu
	consumed0 uint64  // reader-owned count of slots of in consumed
}

func newShmLink(mem []byte, lower bool) *shmLink {
	l := &shmLink{mem: mem}
	c0 := (*uint64)(unsafe.Pointer(&mem[0]))
	c1 := (*uint64)(unsafe.Pointer(&mem[64]))
	slots := func(dir int) [][]byte {
		s := make([][]byte, shmSlots)
		for i := range s {
			off := shmHeader + (dir*shmSlots+i)*shmSlotSize
			s[i] = mem[off : off+shmSlotSize : off+shmSlotSize]
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

// waitSlot waits until the peer has freed a slot of out. It polls the
// shared counter: it only waits when the sender is a whole ring ahead of
// the receiver, and then the receiver's pace decides anyway.
func (l *shmLink) waitSlot(ctx context.Context, failed <-chan struct{}) error {
	for spins := 0; atomic.LoadUint64(l.consumed)+shmSlots <= l.produced; spins++ {
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

// take returns the slot of out to fill next. Slots are used in ring
// order, but when the peer has consumed everything the ring starts over
// at slot 0: back-to-back operations then reuse the same, cache-warm
// slots instead of sweeping the whole ring. The caller holds wmu and has
// waited for a free slot.
func (l *shmLink) take() int {
	if atomic.LoadUint64(l.consumed) == l.produced {
		l.next = 0
	}
	s := l.next
	l.next = (l.next + 1) % shmSlots
	l.produced++
	return s
}

func (l *shmLink) unmap() {
	if l != nil {
		shmfile.Unmap(l.mem)
		l.mem = nil
	}
}

// sameHost reports whether c's two ends have the same IP address.
func sameHost(c net.Conn) bool {
	la, ok1 := c.LocalAddr().(*net.TCPAddr)
	ra, ok2 := c.RemoteAddr().(*net.TCPAddr)
	return ok1 && ok2 && la.IP.Equal(ra.IP)
}

// setupShm runs on every new connection before its reader starts. The
// lower rank offers a ring (a file path, or "" if it has none); the higher
// rank maps it and answers yes or no. Either side falling back leaves the
// pair on plain TCP. The file is unlinked as soon as both have mapped it,
// so nothing is left behind even if a process is killed later.
func setupShm(ctx context.Context, c net.Conn, lower bool) (*shmLink, error) {
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
		defer c.SetDeadline(time.Time{})
	}
	if lower {
		var path string
		var mem []byte
		if shmfile.Enabled() && sameHost(c) {
			path, mem = createShm()
		}
		defer func() {
			if path != "" {
				os.Remove(path)
			}
		}()
		if err := writeString(c, path); err != nil {
			shmfile.Unmap(mem)
			return nil, err
		}
		var ok [1]byte
		if _, err := io.ReadFull(c, ok[:]); err != nil {
			shmfile.Unmap(mem)
			return nil, err
		}
		if ok[0] != 1 || mem == nil {
			shmfile.Unmap(mem)
			return nil, nil
		}
		return newShmLink(mem, true), nil
	}
	path, err := readString(c)
	if err != nil {
		return nil, err
	}
	var mem []byte
	if path != "" && shmfile.Enabled() {
		mem = openShm(path)
	}
	ok := []byte{0}
	if mem != nil {
		ok[0] = 1
	}
	if _, err := c.Write(ok); err != nil {
		shmfile.Unmap(mem)
		return nil, err
	}
	if mem == nil {
		return nil, nil
	}
	return newShmLink(mem, false), nil
}

func createShm() (string, []byte) {
	path, mem, err := shmfile.Create("gotrain-*", shmSize)
	if err != nil {
		return "", nil // the pair stays on TCP
	}
	return path, mem
}

func openShm(path string) []byte {
	mem, _ := shmfile.Open(path, shmSize) // nil: the pair stays on TCP
	return mem
}

func writeString(c net.Conn, s string) error {
	b := make([]byte, 2+len(s))
	binary.LittleEndian.PutUint16(b, uint16(len(s)))
	copy(b[2:], s)
	_, err := c.Write(b)
	return err
}

func readString(c net.Conn) (string, error) {
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return "", err
	}
	l := binary.LittleEndian.Uint16(n[:])
	if l > 4096 {
		return "", fmt.Errorf("shm path of %d bytes", l)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(c, b); err != nil {
		return "", err
	}
	return string(b), nil
}
