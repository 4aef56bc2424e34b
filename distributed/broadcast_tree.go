package distributed

import "context"

// broadcastTree sends root's buffer down a binomial tree, segment by
// segment: a rank forwards segment j to its children while segment j+1
// is still arriving from its parent. Every non-root rank receives the
// buffer once; ⌈log2 n⌉ levels.
func broadcastTree(ctx context.Context, c *comm, buf []byte, elem, root int) error {
	n := c.size()
	v := (c.rank() - root + n) % n // rank relative to root
	parent, mask := -1, 1
	for mask < n {
		if v&mask != 0 {
			parent = (v - mask + root) % n
			break
		}
		mask <<= 1
	}
	var children []int
	for m := mask >> 1; m > 0; m >>= 1 {
		if v+m < n {
			children = append(children, (v+m+root)%n)
		}
	}
	nseg := max(1, (len(buf)+segBytes-1)/segBytes)
	var recvs []pending
	if parent >= 0 {
		recvs = make([]pending, nseg)
		for j := range recvs {
			recvs[j] = c.post(parent, segment(buf, elem, nseg, j), nil)
		}
	}
	for j := 0; j < nseg; j++ {
		if parent >= 0 {
			if err := c.wait(ctx, recvs[j]); err != nil {
				return err
			}
		}
		seg := segment(buf, elem, nseg, j)
		for _, ch := range children {
			if err := c.send(ctx, ch, seg); err != nil {
				return err
			}
		}
	}
	return nil
}
