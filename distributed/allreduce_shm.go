package distributed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/kernels"
)

// allReduceShm runs an allreduce through the group's shared-memory arena
// (package shm owns its layout and waits), one chunk of at most a.Chunk()
// bytes per round. In a round each rank
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
	me, n := a.Rank(), a.Size()
	op := arenaOp(&c.hdr)
	stop := func(r int, want uint64) error { return g.arenaWaitErr(ctx, c, r, want) }
	for off := 0; off < len(buf); off += a.Chunk() {
		chunk := buf[off:min(off+a.Chunk(), len(buf))]
		area := a.Area()
		lo, hi := shareBounds(len(chunk), me, n)
		mine := a.Data(me, area)
		streamCopy(mine[:lo], chunk[:lo])
		streamCopy(mine[hi:len(chunk)], chunk[hi:])
		a.SetRound(op)
		if err := a.PublishAndWait(stop); err != nil {
			return err
		}
		if off == 0 {
			if err := checkPeers(a, c, op); err != nil {
				return err
			}
		}
		share := chunk[lo:hi]
		for r := 0; r < n; r++ {
			if r != me {
				reduce(share, a.Data(r, area)[lo:hi])
			}
		}
		fin(share)
		streamCopy(mine[lo:hi], share)
		if err := a.PublishAndWait(stop); err != nil {
			return err
		}
		for r := 0; r < n; r++ {
			if r != me {
				l, h := shareBounds(len(chunk), r, n)
				copy(chunk[l:h], a.Data(r, area)[l:h])
			}
		}
	}
	return nil
}

// arenaOp is the arena's description of the collective h belongs to.
func arenaOp(h *transport.Header) shm.Op {
	return shm.Op{Seq: h.Seq, Desc: opDescWord(h.Op, h.DType, h.RedOp), Count: h.Count}
}

// opDescWord packs an operation's kind, dtype and reduce op.
func opDescWord(op, dt, red uint8) uint64 {
	return uint64(op) | uint64(dt)<<8 | uint64(red)<<16
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
func checkPeers(a *shm.Arena, c *comm, op shm.Op) error {
	for r := 0; r < a.Size(); r++ {
		if p := a.RoundOp(r); p != op {
			return arenaMismatch(c, r, p)
		}
	}
	return nil
}

// arenaMismatch describes peer r running another operation than this rank.
func arenaMismatch(c *comm, r int, peer shm.Op) error {
	return fmt.Errorf("%w: this rank runs %s, peer rank %d runs %s (through shared memory)",
		transport.ErrMismatch, describeOp(arenaOp(&c.hdr)), r, describeOp(peer))
}

func describeOp(op shm.Op) string {
	desc := op.Desc
	s := fmt.Sprintf("%s #%d (%s ×%d", opKind(desc&0xff), op.Seq, dtype(desc>>8&0xff), op.Count)
	if opKind(desc&0xff) == opAllReduce {
		s += ", " + ReduceOp(desc>>16&0xff).String()
	}
	return s + ")"
}

// arenaWaitErr is checked while this rank waits in the arena for peer r
// to reach phase want: the reasons to stop waiting. It gives up when the
// group is destroyed, the mesh fails (a peer died, aborted or fell
// silent), r left the group, a peer runs another collective, or ctx ends.
func (g *Group) arenaWaitErr(ctx context.Context, c *comm, r int, want uint64) error {
	a := g.arena
	if a.Interrupted() {
		return ErrGroupClosed
	}
	if err := ctx.Err(); err != nil {
		// A PeerError, so that a timeout blames the peer (see Blame).
		return &transport.PeerError{Rank: r, Addr: g.mesh.Pair(r).Addr(), Err: fmt.Errorf("waiting in shared memory: %w", err)}
	}
	if err := g.mesh.Err(); err != nil {
		return err
	}
	if err := g.mesh.Pair(r).Err(); err != nil {
		// r said goodbye (destroyed the group, or unwound through a
		// deferred Destroy): it will never reach this phase.
		return err
	}
	if other, ok := a.PeerRunsOther(r, want, arenaOp(&c.hdr)); ok {
		return arenaMismatch(c, r, other)
	}
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return errors.Join(ErrGroupClosed, errors.New("destroyed while waiting for peers in shared memory"))
	}
	return nil
}

// createArena is shm.CreateArena, replaceable by tests.
var createArena = shm.CreateArena

// setupArena agrees with every rank of the group on a shared-memory
// arena. Rank 0 creates the file and publishes its path and nonce in the
// store; each rank maps it and reports whether it could; the arena is used
// only if all could (ranks on other hosts cannot), so every rank takes the
// same allreduce path. It returns nil, nil when the arena is not used.
func setupArena(ctx context.Context, st store.Store, rank, size int, log *slog.Logger) (*shm.Arena, error) {
	if size < 2 || size > shm.ArenaMaxRanks {
		return nil, nil
	}
	enabled := shm.Enabled()
	var mem []byte
	if rank == 0 {
		var path, offer string
		if enabled {
			var nonce string
			var err error
			if path, nonce, mem, err = createArena(size); err != nil {
				log.Warn("distributed: no shared-memory arena; allreduce goes over the sockets (slower)", "err", err)
			} else {
				offer = path + "\n" + nonce
			}
		}
		defer func() {
			if path != "" {
				os.Remove(path) // every rank has mapped it or given up
			}
		}()
		if err := st.Set(ctx, "arena/offer", []byte(offer)); err != nil {
			shm.Unmap(mem)
			return nil, fmt.Errorf("publish the shared-memory arena: %w", err)
		}
	} else {
		offer, err := st.Get(ctx, "arena/offer")
		if err != nil {
			return nil, fmt.Errorf("read the shared-memory arena offer: %w", err)
		}
		if p, n, ok := bytes.Cut(offer, []byte("\n")); ok && enabled {
			mem = shm.OpenArena(string(p), size, string(n))
		}
	}
	ok := "0"
	if mem != nil {
		ok = "1"
	}
	if err := st.Set(ctx, "arena/ok/"+strconv.Itoa(rank), []byte(ok)); err != nil {
		shm.Unmap(mem)
		return nil, fmt.Errorf("report the shared-memory arena: %w", err)
	}
	all := true
	for r := 0; r < size; r++ {
		v, err := st.Get(ctx, "arena/ok/"+strconv.Itoa(r))
		if err != nil {
			shm.Unmap(mem)
			return nil, fmt.Errorf("agree on the shared-memory arena: %w", err)
		}
		all = all && string(v) == "1"
	}
	if !all {
		shm.Unmap(mem)
		return nil, nil
	}
	return shm.NewArena(mem, rank, size), nil
}
