package distributed

import (
	"context"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// allReduceDoubling is the latency-optimal allreduce for small buffers:
// recursive doubling. With p the largest power of two ≤ n, the n-p extra
// ranks first fold their buffer into rank r-p; then in log2(p) steps each
// rank exchanges its whole buffer with rank r XOR 2^i and reduces; finally
// the extra ranks get the result back. For 2 ranks it is one direct
// exchange. Partners reduce the same two values, so every rank ends with
// the same bits.
func allReduceDoubling(ctx context.Context, c *comm, buf []byte, elem int, reduce transport.ReduceFunc, fin func([]byte)) error {
	n, r := c.size(), c.rank()
	p := 1
	for p*2 <= n {
		p *= 2
	}
	if r >= p {
		// Extra rank: hand the buffer to r-p, get the result back.
		pd := c.post(r-p, buf, nil)
		if err := c.send(ctx, r-p, buf); err != nil {
			return err
		}
		return c.wait(ctx, pd)
	}
	scratch := c.scratch(len(buf))
	if r < n-p {
		if err := c.wait(ctx, c.post(r+p, scratch, nil)); err != nil {
			return err
		}
		reduce(buf, scratch)
	}
	nseg := segments(len(buf))
	recvs := make([]pending, nseg)
	for mask := 1; mask < p; mask <<= 1 {
		peer := r ^ mask
		// Receive into scratch, not buf: buf is being sent concurrently.
		// Segments let the reduction of one overlap the arrival of the
		// next.
		for j := range recvs {
			recvs[j] = c.post(peer, segment(scratch, elem, nseg, j), nil)
		}
		for j := 0; j < nseg; j++ {
			if err := c.send(ctx, peer, segment(buf, elem, nseg, j)); err != nil {
				return err
			}
		}
		for j, pd := range recvs {
			if err := c.wait(ctx, pd); err != nil {
				return err
			}
			reduce(segment(buf, elem, nseg, j), segment(scratch, elem, nseg, j))
		}
	}
	fin(buf)
	if r < n-p {
		return c.send(ctx, r+p, buf)
	}
	return nil
}
