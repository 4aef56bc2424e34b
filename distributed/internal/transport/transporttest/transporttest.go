// Package transporttest checks that an implementation of transport.Mesh
// keeps the contract the collective algorithms rely on: collective frames
// in order into posted receives (copied or reduced), point-to-point frames
// matched by tag, mismatched and malformed frames detected, a departed
// peer failing the receives that need it, Fail telling every peer, and
// Close. Every transport runs it:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T, n int) []transport.Mesh {
//			... connect n ranks in this process, mesh r being rank r ...
//		})
//	}
//
// The checks use only the transport interfaces, so they hold for any
// implementation, and run one after another (never in parallel), so a
// caller may set environment variables around Run.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/internal/testproc"
)

// Connect returns n connected meshes, the one at index r being rank r, or
// fails t. The suite closes them when the check ends.
type Connect func(t *testing.T, n int) []transport.Mesh

// bound is how long any expected completion or failure may take.
const bound = 10 * time.Second

// Run runs every check as a subtest of t.
func Run(t *testing.T, connect Connect) {
	checks := []struct {
		name string
		fn   func(*testing.T, Connect)
	}{
		{"SizeOne", SizeOne},
		{"FramesInOrder", FramesInOrder},
		{"FramesPostedLate", FramesPostedLate},
		{"ReducingReceive", ReducingReceive},
		{"P2PTags", P2PTags},
		{"ConcurrentSends", ConcurrentSends},
		{"Mismatch", Mismatch},
		{"MismatchAgainstBegin", MismatchAgainstBegin},
		{"MismatchP2P", MismatchP2P},
		{"Malformed", Malformed},
		{"PeerLeaves", PeerLeaves},
		{"Fail", Fail},
		{"Close", Close},
		{"SendDeadline", SendDeadline},
		{"Heartbeats", Heartbeats},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.fn(t, connect) })
	}
}

// mesh connects n ranks and closes them all when t ends.
func mesh(t *testing.T, connect Connect, n int) []transport.Mesh {
	t.Helper()
	ms := connect(t, n)
	if len(ms) != n {
		t.Fatalf("connect(%d) returned %d meshes", n, len(ms))
	}
	for r, m := range ms {
		if m.Rank() != r || m.Size() != n {
			t.Fatalf("mesh %d: rank %d, size %d; want rank %d, size %d", r, m.Rank(), m.Size(), r, n)
		}
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, m := range ms {
			wg.Go(func() { m.Close() })
		}
		wg.Wait()
	})
	return ms
}

func collective(seq uint64, count int) transport.Header {
	return transport.Header{Kind: transport.KindCollective, Op: 1, DType: 1, Root: -1, Seq: seq, Count: uint64(count)}
}

func p2p(tag int64, count int) transport.Header {
	return transport.Header{Kind: transport.KindP2P, DType: 1, Root: -1, Count: uint64(count), Tag: tag}
}

// pattern is n bytes that differ for every seed.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>8)
	}
	return b
}

// await waits for r to complete and returns its error.
func await(t *testing.T, what string, r *transport.Recv) error {
	t.Helper()
	select {
	case <-r.Done():
		return r.Err()
	case <-time.After(bound):
		t.Fatalf("%s: receive not completed within %v", what, bound)
		return nil
	}
}

// awaitOK waits for r and checks it received want.
func awaitOK(t *testing.T, what string, r *transport.Recv, want []byte) {
	t.Helper()
	if err := await(t, what, r); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !bytes.Equal(r.Buf, want) {
		t.Fatalf("%s: %d bytes received differ from those sent", what, len(want))
	}
}

// send sends and fails t on an error.
func send(t *testing.T, m transport.Mesh, peer int, h transport.Header, payload []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := m.Pair(peer).Send(ctx, h, payload); err != nil {
		t.Fatalf("rank %d: send to %d: %v", m.Rank(), peer, err)
	}
}

// failedWith waits for m to fail and returns its error.
func failedWith(t *testing.T, m transport.Mesh) error {
	t.Helper()
	if !testproc.Poll(bound, func() bool { return m.Err() != nil }) {
		t.Fatalf("rank %d: mesh not failed within %v", m.Rank(), bound)
	}
	return m.Err()
}

// holdsFrame reports whether p's reader holds a frame nothing was posted
// for: then, and only then, LastHeard is the present.
func holdsFrame(p transport.Pair) bool {
	now := time.Now()
	return !p.LastHeard().Before(now)
}

// SizeOne: a mesh of one rank connects and closes.
func SizeOne(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 1)
	if err := ms[0].Err(); err != nil {
		t.Fatalf("fresh mesh: Err = %v", err)
	}
}

// frameSizes are the payload sizes the frame checks send: empty, tiny,
// around the sizes implementations switch paths at, several frames in
// flight at once, and the largest frame allowed.
var frameSizes = []int{0, 1, 8, 4 << 10, 32<<10 - 1, 32 << 10, 64 << 10, 1 << 20, 1<<20 + 1, 3 << 20, transport.MaxPayload,
	512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10,
	512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10, 512 << 10}

// FramesInOrder: between every two ranks of three, in both directions at
// once, frames of every size land in the receives posted for them, in
// order.
func FramesInOrder(t *testing.T, connect Connect) {
	const n = 3
	ms := mesh(t, connect, n)
	type link struct{ from, to int }
	recvs := map[link][]*transport.Recv{}
	for to := range n {
		for from := range n {
			if from == to {
				continue
			}
			for seq, size := range frameSizes {
				r := transport.NewRecv(collective(uint64(seq), size), make([]byte, size), nil)
				ms[to].Pair(from).Post(r)
				recvs[link{from, to}] = append(recvs[link{from, to}], r)
			}
		}
	}
	errs := make(chan error, n*n)
	var wg sync.WaitGroup
	for from := range n {
		for to := range n {
			if from == to {
				continue
			}
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				defer cancel()
				for seq, size := range frameSizes {
					if err := ms[from].Pair(to).Send(ctx, collective(uint64(seq), size), pattern(size, seq+10*from+100*to)); err != nil {
						errs <- fmt.Errorf("rank %d: send frame %d to %d: %w", from, seq, to, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for l, rs := range recvs {
		for seq, r := range rs {
			awaitOK(t, fmt.Sprintf("frame %d (%d bytes) from rank %d to %d", seq, frameSizes[seq], l.from, l.to), r,
				pattern(frameSizes[seq], seq+10*l.from+100*l.to))
		}
	}
}

// FramesPostedLate: frames that arrive before their receive is posted
// wait for it, in order.
func FramesPostedLate(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	sizes := []int{100, 0, 3000, 1}
	for seq, size := range sizes {
		send(t, ms[0], 1, collective(uint64(seq), size), pattern(size, seq))
	}
	// The first has arrived when rank 1 holds it; the others wait behind.
	if !testproc.Poll(bound, func() bool { return holdsFrame(ms[1].Pair(0)) }) {
		t.Fatalf("rank 1 holds no early frame %v after it was sent", bound)
	}
	for seq, size := range sizes {
		r := transport.NewRecv(collective(uint64(seq), size), make([]byte, size), nil)
		ms[1].Pair(0).Post(r)
		awaitOK(t, fmt.Sprintf("frame %d posted after it arrived", seq), r, pattern(size, seq))
	}
}

// ReducingReceive: a receive with a ReduceFunc combines the payload into
// its buffer instead of overwriting it.
func ReducingReceive(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	add := func(dst, src []byte) {
		if len(dst) != len(src) {
			panic(fmt.Sprintf("transporttest: reduce of %d into %d bytes", len(src), len(dst)))
		}
		for i := range src {
			dst[i] += src[i]
		}
	}
	sizes := []int{8, 4 << 10, 64 << 10, 1 << 20, 3<<20 + 8}
	recvs := make([]*transport.Recv, len(sizes))
	for seq, size := range sizes {
		recvs[seq] = transport.NewRecv(collective(uint64(seq), size), pattern(size, 50+seq), add)
		ms[1].Pair(0).Post(recvs[seq])
	}
	for seq, size := range sizes {
		send(t, ms[0], 1, collective(uint64(seq), size), pattern(size, seq))
	}
	for seq, size := range sizes {
		want, src := pattern(size, 50+seq), pattern(size, seq)
		for i := range want {
			want[i] += src[i]
		}
		awaitOK(t, fmt.Sprintf("reducing receive of %d bytes", size), recvs[seq], want)
	}
}

// P2PTags: point-to-point messages are matched by tag, not by order; a
// message may span several frames; messages that arrive before their
// receive are kept; two messages with one tag arrive in order; and
// collective frames on the same pair are not disturbed.
func P2PTags(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	msg := func(tag int64, n int) []byte { return pattern(n, int(tag)) }
	early := transport.NewRecv(p2p(2, 40), make([]byte, 40), nil) // posted before anything is sent
	ms[1].Pair(0).PostP2P(early)
	coll := transport.NewRecv(collective(0, 64), make([]byte, 64), nil)
	ms[1].Pair(0).Post(coll)

	one := msg(1, 150) // two frames
	send(t, ms[0], 1, p2p(1, 150), one[:100])
	send(t, ms[0], 1, collective(0, 64), pattern(64, 99))
	send(t, ms[0], 1, p2p(1, 150), one[100:])
	send(t, ms[0], 1, p2p(2, 40), msg(2, 40))
	send(t, ms[0], 1, p2p(3, 0), nil) // an empty message is one empty frame
	send(t, ms[0], 1, p2p(5, 10), msg(5, 10))
	send(t, ms[0], 1, p2p(5, 10), msg(6, 10))
	// The others have arrived, before most receives are posted, when a
	// last message sent after them has.
	last := transport.NewRecv(p2p(9, 1), make([]byte, 1), nil)
	ms[1].Pair(0).PostP2P(last)
	send(t, ms[0], 1, p2p(9, 1), msg(9, 1))
	awaitOK(t, "tag 9, sent last", last, msg(9, 1))

	awaitOK(t, "tag 2, posted before it was sent", early, msg(2, 40))
	for _, c := range []struct {
		tag  int64
		want []byte
	}{{3, []byte{}}, {1, one}, {5, msg(5, 10)}, {5, msg(6, 10)}} {
		r := transport.NewRecv(p2p(c.tag, len(c.want)), make([]byte, len(c.want)), nil)
		ms[1].Pair(0).PostP2P(r)
		awaitOK(t, fmt.Sprintf("tag %d, posted after it arrived", c.tag), r, c.want)
	}
	awaitOK(t, "collective frame between p2p frames", coll, pattern(64, 99))
}

// ConcurrentSends: frames sent at once from several goroutines on one
// pair are not interleaved.
func ConcurrentSends(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	const perTag = 30
	size := func(tag int64, i int) int { return 1 + (i*4099+int(tag)*65537)%(96<<10) }
	var recvs []*transport.Recv
	for tag := int64(1); tag <= 3; tag++ {
		for i := range perTag {
			r := transport.NewRecv(p2p(tag, size(tag, i)), make([]byte, size(tag, i)), nil)
			ms[1].Pair(0).PostP2P(r)
			recvs = append(recvs, r)
		}
	}
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	for tag := int64(1); tag <= 3; tag++ {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			for i := range perTag {
				if err := ms[0].Pair(1).Send(ctx, p2p(tag, size(tag, i)), pattern(size(tag, i), i+int(tag)*1000)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	k := 0
	for tag := int64(1); tag <= 3; tag++ {
		for i := range perTag {
			awaitOK(t, fmt.Sprintf("tag %d message %d", tag, i), recvs[k], pattern(size(tag, i), i+int(tag)*1000))
			k++
		}
	}
}

// Mismatch: a collective frame of another operation than the posted
// receive expects fails that receive with a MismatchError showing both,
// and every rank of the mesh hears of it.
func Mismatch(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 3)
	r := transport.NewRecv(collective(0, 2), make([]byte, 8), nil)
	ms[0].Pair(2).Post(r)
	send(t, ms[2], 0, collective(0, 4), make([]byte, 16))
	err := await(t, "mismatched receive", r)
	var me *transport.MismatchError
	if !errors.As(err, &me) || me.Got.Count != 4 || me.Want.Count != 2 {
		t.Fatalf("got %v, want a MismatchError expecting count 2, receiving 4", err)
	}
	if !errors.Is(err, transport.ErrMismatch) {
		t.Fatalf("%v does not match ErrMismatch", err)
	}
	for _, m := range ms {
		if err := failedWith(t, m); !errors.Is(err, transport.ErrAborted) && !errors.Is(err, transport.ErrMismatch) {
			t.Errorf("rank %d: mesh failed with %v, want ErrMismatch or ErrAborted", m.Rank(), err)
		}
	}
}

// MismatchAgainstBegin: a frame of an earlier operation than the one this
// rank announced with Begin fails the mesh, with no receive posted for it.
func MismatchAgainstBegin(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	ms[1].Begin(collective(5, 1))
	send(t, ms[0], 1, collective(3, 1), make([]byte, 8))
	if err := failedWith(t, ms[1]); !errors.Is(err, transport.ErrMismatch) {
		t.Fatalf("rank 1: mesh failed with %v, want ErrMismatch", err)
	}
}

// MismatchP2P: a point-to-point frame with the receive's tag but another
// element count fails the receive with ErrMismatch.
func MismatchP2P(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	r := transport.NewRecv(p2p(7, 3), make([]byte, 12), nil)
	ms[1].Pair(0).PostP2P(r)
	send(t, ms[0], 1, p2p(7, 4), make([]byte, 12))
	if err := await(t, "mismatched p2p receive", r); !errors.Is(err, transport.ErrMismatch) {
		t.Fatalf("got %v, want ErrMismatch", err)
	}
}

// Malformed: a frame that breaks the format (a kind that does not exist,
// reserved flag bits) fails the receiving mesh with ErrMalformed naming
// the sender, and its pending receives; nothing panics.
func Malformed(t *testing.T, connect Connect) {
	for name, h := range map[string]transport.Header{
		"kind":  {Kind: 200, Root: -1},
		"flags": {Kind: transport.KindCollective, Flags: 2, Root: -1, Count: 1},
	} {
		t.Run(name, func(t *testing.T) {
			ms := mesh(t, connect, 2)
			r := transport.NewRecv(collective(0, 1), make([]byte, 4), nil)
			ms[1].Pair(0).Post(r)
			// The sender may or may not refuse the header itself; the
			// receiver must not accept it.
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			if err := ms[0].Pair(1).Send(ctx, h, make([]byte, 4)); err != nil {
				return
			}
			if err := await(t, "receive pending during a malformed frame", r); !errors.Is(err, transport.ErrMalformed) {
				t.Fatalf("pending receive: got %v, want ErrMalformed", err)
			}
			err := failedWith(t, ms[1])
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrMalformed) || !errors.As(err, &pe) || pe.Rank != 0 {
				t.Fatalf("rank 1: mesh failed with %v, want ErrMalformed naming peer rank 0", err)
			}
		})
	}
}

// PeerLeaves: when a rank closes its mesh, the receives that need it fail
// with ErrPeerLost naming it, at once and for later posts too, while the
// other ranks go on exchanging frames.
func PeerLeaves(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 3)
	coll := transport.NewRecv(collective(0, 8), make([]byte, 32), nil)
	ms[0].Pair(2).Post(coll)
	pt := transport.NewRecv(p2p(1, 8), make([]byte, 32), nil)
	ms[0].Pair(2).PostP2P(pt) // pending once Post returns
	start := time.Now()
	ms[2].Close()
	for _, c := range []struct {
		what string
		r    *transport.Recv
	}{{"pending collective receive", coll}, {"pending p2p receive", pt}} {
		err := await(t, c.what, c.r)
		var pe *transport.PeerError
		if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Rank != 2 {
			t.Fatalf("%s: got %v, want ErrPeerLost naming peer rank 2", c.what, err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("receives failed %v after the peer closed", d)
	}
	if err := ms[0].Pair(2).Err(); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("Pair(2).Err after the peer left: got %v, want ErrPeerLost", err)
	}
	if err := ms[0].Pair(1).Err(); err != nil {
		t.Fatalf("Pair(1).Err of a peer that stays: %v", err)
	}
	late := transport.NewRecv(collective(1, 8), make([]byte, 32), nil)
	ms[0].Pair(2).Post(late)
	if err := await(t, "receive posted after the peer left", late); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("receive posted after the peer left: got %v, want ErrPeerLost", err)
	}
	r := transport.NewRecv(collective(0, 8), make([]byte, 32), nil)
	ms[0].Pair(1).Post(r)
	send(t, ms[1], 0, collective(0, 8), pattern(32, 1))
	awaitOK(t, "frame between the ranks that stay", r, pattern(32, 1))
}

// Fail: the rank that fails its mesh has its pending and later receives
// fail and its error kept; every peer's mesh fails with an AbortError
// carrying the code and the reason.
func Fail(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 3)
	pending := make([]*transport.Recv, 3)
	for r, m := range ms {
		pending[r] = transport.NewRecv(collective(0, 1), make([]byte, 4), nil)
		m.Pair((r + 1) % 3).Post(pending[r])
	}
	cause := errors.New("rank 1 gave up")
	ms[1].Fail(transport.AbortTimeout, cause)
	if err := ms[1].Err(); !errors.Is(err, cause) {
		t.Fatalf("rank 1: Err = %v after Fail(%v)", err, cause)
	}
	for r, m := range ms {
		if err := await(t, fmt.Sprintf("rank %d's pending receive", r), pending[r]); err == nil {
			t.Fatalf("rank %d: pending receive succeeded after rank 1 failed the mesh", r)
		}
		if r == 1 {
			continue
		}
		err := failedWith(t, m)
		var ab *transport.AbortError
		if !errors.As(err, &ab) || ab.Code != transport.AbortTimeout || !strings.Contains(ab.Reason, cause.Error()) {
			t.Fatalf("rank %d: mesh failed with %v, want an AbortError with code %d and reason %q", r, err, transport.AbortTimeout, cause)
		}
	}
	late := transport.NewRecv(collective(1, 1), make([]byte, 4), nil)
	ms[1].Pair(0).Post(late)
	if err := await(t, "receive posted after Fail", late); err == nil {
		t.Fatal("receive posted after Fail succeeded")
	}
	if err := ms[1].Pair(0).Send(context.Background(), collective(1, 1), make([]byte, 4)); err == nil {
		t.Fatal("Send after Fail succeeded")
	}
}

// Close: pending receives fail, Err is ErrClosed, later receives and
// sends fail, and closing again returns.
func Close(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	r := transport.NewRecv(collective(0, 1), make([]byte, 4), nil)
	ms[0].Pair(1).Post(r)
	ms[0].Close()
	select {
	case <-r.Done():
		if r.Err() == nil {
			t.Fatal("pending receive succeeded on a closed mesh")
		}
	default:
		t.Fatal("Close returned with a receive still pending")
	}
	if err := ms[0].Err(); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Err after Close = %v, want ErrClosed", err)
	}
	late := transport.NewRecv(collective(1, 1), make([]byte, 4), nil)
	ms[0].Pair(1).Post(late)
	if err := await(t, "receive posted after Close", late); err == nil {
		t.Fatal("receive posted after Close succeeded")
	}
	if err := ms[0].Pair(1).Send(context.Background(), collective(1, 1), make([]byte, 4)); err == nil {
		t.Fatal("Send after Close succeeded")
	}
	done := make(chan struct{})
	go func() { ms[0].Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatal("a second Close did not return")
	}
}

// SendDeadline: a Send blocked on a peer that reads nothing returns an
// error once its context's deadline passes.
func SendDeadline(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	errc := make(chan error, 1)
	go func() {
		payload := make([]byte, 1<<20)
		for seq := range 1024 { // far more than any buffering between the two
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err := ms[0].Pair(1).Send(ctx, collective(uint64(seq), len(payload)), payload)
			cancel()
			if err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("1 GiB sent to a peer that reads nothing")
		}
	case <-time.After(bound):
		t.Fatalf("Send still blocked %v after its deadline", bound)
	}
}

// Heartbeats: an idle mesh stays up, and each rank keeps hearing from its
// peers though nobody sends a frame (LastHeard stays recent), for longer
// than the heartbeat tick (at most a second).
func Heartbeats(t *testing.T, connect Connect) {
	ms := mesh(t, connect, 2)
	start := time.Now()
	// Heard after a second of idleness: a heartbeat, as nothing else is sent.
	heard := func() bool {
		return ms[0].Pair(1).LastHeard().After(start.Add(time.Second)) && ms[1].Pair(0).LastHeard().After(start.Add(time.Second))
	}
	testproc.Poll(bound, heard)
	for r, m := range ms {
		if err := m.Err(); err != nil {
			t.Fatalf("rank %d: idle mesh failed: %v", r, err)
		}
		p := m.Pair(1 - r)
		if err := p.Err(); err != nil {
			t.Fatalf("rank %d: idle pair failed: %v", r, err)
		}
		if h := p.LastHeard(); !h.After(start.Add(time.Second)) {
			t.Errorf("rank %d: last heard from its idle peer %v after the start, want heartbeats after 1 s", r, h.Sub(start))
		}
	}
	r := transport.NewRecv(collective(0, 8), make([]byte, 32), nil)
	ms[1].Pair(0).Post(r)
	send(t, ms[0], 1, collective(0, 8), pattern(32, 3))
	awaitOK(t, "frame after idle heartbeats", r, pattern(32, 3))
}
