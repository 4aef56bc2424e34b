package distributed

import (
	"context"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// reduceChain reduces into root along a pipelined chain: with v the rank
// relative to root, v = n-1 sends to n-2, which reduces and sends to n-3,
// ... to the root, segment by segment, so all links are busy at once.
// Each rank sends the buffer once. Non-root ranks reduce into a copy and
// leave their buffer unchanged.
func reduceChain(ctx context.Context, c *comm, buf []byte, elem, root int, reduce transport.ReduceFunc, fin func([]byte)) error {
	work := buf
	if c.rank() != root {
		work = append([]byte(nil), buf...)
	}
	return reduceChainInto(ctx, c, work, elem, root, reduce, fin)
}

// reduceChainInto is reduceChain using work, which it overwrites on every
// rank, as the buffer.
func reduceChainInto(ctx context.Context, c *comm, work []byte, elem, root int, reduce transport.ReduceFunc, fin func([]byte)) error {
	n := c.size()
	v := (c.rank() - root + n) % n
	nseg := max(1, (len(work)+segBytes-1)/segBytes)
	var recvs []pending
	if v < n-1 {
		from := (v + 1 + root) % n
		recvs = make([]pending, nseg)
		for j := range recvs {
			recvs[j] = c.post(from, segment(work, elem, nseg, j), reduce)
		}
	}
	to := (v - 1 + root + n) % n
	for j := 0; j < nseg; j++ {
		seg := segment(work, elem, nseg, j)
		if recvs != nil {
			if err := c.wait(ctx, recvs[j]); err != nil {
				return err
			}
		}
		if v == 0 {
			fin(seg)
			continue
		}
		if err := c.send(ctx, to, seg); err != nil {
			return err
		}
	}
	return nil
}
