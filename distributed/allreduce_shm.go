package distributed

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/internal/transport"
)

// allReduceShm runs an allreduce through the group's shared-memory arena,
// one chunk of at most a.chunk bytes per round. In a round each rank
//
//  1. copies its chunk, except its own share, into its region and
//     announces it (phase 2k+1);
//  2. once every rank has announced, reduces its share: its own data plus
//     every other rank's copy of that share, in rank order, straight into
//     buf, then applies fin and publishes the result in its region (phase
//     2k+2);
//  3. once every rank has published, copies the other shares' results
//     into buf.
//
// A share is reduced by one rank only, so every rank ends with the same
// bits. Regions alternate between two areas: a rank overwrites an area
// two rounds later, by which time every peer has announced the round in
// between and so has finished reading it.
func (g *Group) allReduceShm(ctx context.Context, c *comm, buf []byte, reduce transport.ReduceFunc, fin func([]byte)) error {
	a := g.arena
	me, n := a.rank, a.size
	desc := opDescWord(c.hdr.Op, c.hdr.DType, c.hdr.RedOp)
	for off := 0; off < len(buf); off += a.chunk {
		chunk := buf[off:min(off+a.chunk, len(buf))]
		area := int((a.round / 2) % 2)
		lo, hi := shareBounds(len(chunk), me, n)
		mine := a.data[me][area]
		streamCopy(mine[:lo], chunk[:lo])
		streamCopy(mine[hi:len(chunk)], chunk[hi:])
		ctl := a.ctl[me]
		ctl.seq, ctl.desc, ctl.count = c.hdr.Seq, desc, c.hdr.Count
		if err := a.publishAndWait(ctx, g, c); err != nil {
			return err
		}
		if off == 0 {
			if err := a.checkPeers(c, desc); err != nil {
				return err
			}
		}
		share := chunk[lo:hi]
		for r := 0; r < n; r++ {
			if r != me {
				reduce(share, a.data[r][area][lo:hi])
			}
		}
		fin(share)
		streamCopy(mine[lo:hi], share)
		if err := a.publishAndWait(ctx, g, c); err != nil {
			return err
		}
		for r := 0; r < n; r++ {
			if r != me {
				l, h := shareBounds(len(chunk), r, n)
				copy(chunk[l:h], a.data[r][area][l:h])
			}
		}
	}
	return nil
}

// streamCopy copies what peers will read next with non-temporal stores,
// which send it to memory instead of leaving it in this core's cache:
// cheaper for this rank (no read-for-ownership of lines the peers hold)
// and for the readers (memory instead of another core's cache). Every
// dtype is a whole number of 4-byte words.
func streamCopy(dst, src []byte) {
	kernels.StreamCopy(f32(dst), f32(src))
}

// shareBounds returns rank r's byte range of an n-rank split of size
// bytes: equal shares rounded up to whole cache lines, so no two ranks
// write the same line (the last shares may be short or empty).
func shareBounds(size, r, n int) (int, int) {
	per := (size + n - 1) / n
	per = (per + 63) &^ 63
	return min(r*per, size), min((r+1)*per, size)
}

// checkPeers compares every rank's description of the operation with this
// rank's: the arena has no frame headers, so a mismatched allreduce
// (another count, dtype or reduce op, or another sequence number) is
// caught here, on every rank.
func (a *arena) checkPeers(c *comm, desc uint64) error {
	for r := 0; r < a.size; r++ {
		p := a.ctl[r]
		if p.seq != c.hdr.Seq || p.desc != desc || p.count != c.hdr.Count {
			return a.mismatch(c, r, p.seq, p.desc, p.count)
		}
	}
	return nil
}

// mismatch describes peer r running another operation than this rank.
func (a *arena) mismatch(c *comm, r int, seq, desc, count uint64) error {
	return fmt.Errorf("%w: this rank runs %s, peer rank %d runs %s (through shared memory)",
		transport.ErrMismatch, describeOp(c.hdr.Seq, opDescWord(c.hdr.Op, c.hdr.DType, c.hdr.RedOp), c.hdr.Count),
		r, describeOp(seq, desc, count))
}

func describeOp(seq, desc, count uint64) string {
	s := fmt.Sprintf("%s #%d (%s ×%d", opKind(desc&0xff), seq, dtype(desc>>8&0xff), count)
	if opKind(desc&0xff) == opAllReduce {
		s += ", " + ReduceOp(desc>>16&0xff).String()
	}
	return s + ")"
}

// publishAndWait ends this rank's current phase and waits until every
// rank has ended it too. It spins for up to the adaptive budget (a peer is
// usually microseconds away), then sleeps on the peer's phase word, a
// futex the peer wakes when it publishes; it gives up when ctx ends, the
// group is destroyed, a peer runs another collective, or the mesh fails
// (a peer died or aborted).
func (a *arena) publishAndWait(ctx context.Context, g *Group, c *comm) error {
	a.round++
	want := a.round
	me := a.ctl[a.rank]
	atomic.StoreUint64(&me.phase, want)
	if atomic.LoadUint64(&me.sleepers) != 0 {
		futexWakeAll(&me.phase)
	}
	spins := 0
	var start time.Time
	for r := 0; r < a.size; r++ {
		p := a.ctl[r]
		for atomic.LoadUint64(&p.phase) < want {
			spins++
			if spins&255 != 0 {
				if spins&63 == 0 {
					runtime.Gosched()
				}
				continue
			}
			if start.IsZero() {
				start = time.Now()
			}
			if err := a.waitErr(ctx, g, c, r, want); err != nil {
				return err
			}
			if time.Since(start) < a.spin {
				continue
			}
			// Announce the sleep, then re-check: the peer either sees
			// the announcement after its store (and wakes us) or its
			// store is seen here. The timeout re-checks errors.
			atomic.AddUint64(&p.sleepers, 1)
			if v := atomic.LoadUint64(&p.phase); v < want {
				futexSleep(&p.phase, uint32(v), 5*time.Millisecond)
			}
			atomic.AddUint64(&p.sleepers, ^uint64(0))
		}
	}
	if !start.IsZero() {
		a.adaptSpin(time.Since(start))
	}
	return nil
}

// waitErr is checked while this rank waits for peer r: the reasons to
// stop waiting.
func (a *arena) waitErr(ctx context.Context, g *Group, c *comm, r int, want uint64) error {
	if a.closed.Load() {
		return ErrGroupClosed
	}
	if err := g.mesh.Err(); err != nil {
		return err
	}
	// The peer writes its phase before it begins a later operation, so
	// reading the phase after its current operation tells a peer that
	// has legitimately moved on (phase reached) from a mismatch.
	p := a.ctl[r]
	cur := atomic.LoadUint64(&p.cur)
	desc, count := p.curDesc, p.curCount
	if atomic.LoadUint64(&p.phase) < want && (cur > c.hdr.Seq+1 ||
		cur == c.hdr.Seq+1 && (desc != opDescWord(c.hdr.Op, c.hdr.DType, c.hdr.RedOp) || count != c.hdr.Count)) {
		return a.mismatch(c, r, cur-1, desc, count)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("waiting for peer rank %d (%s) in shared memory: %w", r, g.mesh.Pair(r).Addr(), err)
	}
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return errors.Join(ErrGroupClosed, errors.New("destroyed while waiting for peers in shared memory"))
	}
	return nil
}
