package distributed

import (
	"context"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// segBytes is the pipelining unit of the ring and the tree: each block
// is cut into segments of about this size, and a segment is forwarded as
// soon as it has arrived (and been reduced), so reduction and transfer in
// both directions overlap.
const segBytes = 512 << 10

// allReduceRing is the bandwidth-optimal allreduce: a reduce-scatter
// around the ring (n-1 steps, after which rank r holds the reduced block
// r+1), then an allgather around the ring (n-1 steps). Each rank sends and
// receives 2(n-1)/n of the buffer.
func allReduceRing(ctx context.Context, c *comm, buf []byte, elem int, reduce transport.ReduceFunc, fin func([]byte)) error {
	n := c.size()
	return ring(ctx, c, splitElems(buf, elem, n), elem, ringSpec{
		offset: 0, steps: 2 * (n - 1), reduceSteps: n - 1, reduce: reduce, atOwned: fin,
	})
}

// ringSpec says what ring does.
type ringSpec struct {
	// At step k rank r sends block (r+offset-k) mod n to rank r+1 and
	// receives block (r+offset-k-1) mod n from rank r-1.
	offset, steps int
	// The first reduceSteps steps reduce what they receive into the block;
	// the others overwrite it.
	reduceSteps int
	reduce      transport.ReduceFunc
	// atOwned, if not nil, is applied to each segment of the block that
	// is complete after the reduce steps, before it is sent on.
	atOwned func(seg []byte)
}

// ring runs a segmented, pipelined ring over blocks. All receives are
// posted first, so the reader fills (or reduces into) each segment the
// moment it arrives, while this goroutine sends; a segment is sent at
// step k as soon as step k-1 delivered it.
func ring(ctx context.Context, c *comm, blocks [][]byte, elem int, s ringSpec) error {
	n, r := c.size(), c.rank()
	right, left := (r+1)%n, (r+n-1)%n
	maxBlock := 0
	for _, b := range blocks {
		maxBlock = max(maxBlock, len(b))
	}
	nseg := segments(maxBlock)
	block := func(i int) []byte { return blocks[((i%n)+n)%n] }

	recvs := make([]pending, s.steps*nseg)
	for k := 0; k < s.steps; k++ {
		var reduce transport.ReduceFunc
		if k < s.reduceSteps {
			reduce = s.reduce
		}
		b := block(r + s.offset - k - 1)
		for j := 0; j < nseg; j++ {
			recvs[k*nseg+j] = c.post(left, segment(b, elem, nseg, j), reduce)
		}
	}
	for k := 0; k < s.steps; k++ {
		b := block(r + s.offset - k)
		for j := 0; j < nseg; j++ {
			seg := segment(b, elem, nseg, j)
			if k > 0 {
				if err := c.wait(ctx, recvs[(k-1)*nseg+j]); err != nil {
					return err
				}
				if k == s.reduceSteps && s.atOwned != nil {
					s.atOwned(seg)
				}
			}
			if err := c.send(ctx, right, seg); err != nil {
				return err
			}
		}
	}
	for j := 0; j < nseg; j++ {
		if err := c.wait(ctx, recvs[(s.steps-1)*nseg+j]); err != nil {
			return err
		}
		if s.steps == s.reduceSteps && s.atOwned != nil {
			s.atOwned(segment(block(r+s.offset-s.steps), elem, nseg, j))
		}
	}
	return nil
}

// segments is how many segments of at most segBytes a block of n bytes
// is cut into. (More, smaller segments for mid-sized blocks were measured
// slower: each frame costs a wake-up of the reader and of the waiter.)
func segments(n int) int {
	return max(1, (n+segBytes-1)/segBytes)
}

// splitElems cuts buf into n blocks of whole elements whose sizes differ
// by at most one element.
func splitElems(buf []byte, elem, n int) [][]byte {
	count := len(buf) / elem
	blocks := make([][]byte, n)
	for i := range blocks {
		lo, hi := i*count/n, (i+1)*count/n
		blocks[i] = buf[lo*elem : hi*elem : hi*elem]
	}
	return blocks
}

// segment returns part j of nseg of b, in whole elements.
func segment(b []byte, elem, nseg, j int) []byte {
	count := len(b) / elem
	lo, hi := j*count/nseg, (j+1)*count/nseg
	return b[lo*elem : hi*elem : hi*elem]
}
