package distributed

import "context"

// gatherDirect: every rank sends its block straight to root, which
// receives each into place. Root receives (n-1) blocks.
func gatherDirect(ctx context.Context, c *comm, dst, src []byte, root int) error {
	n, r := c.size(), c.rank()
	if r != root {
		return c.send(ctx, root, src)
	}
	blocks := split(dst, n)
	copy(blocks[r], src)
	recvs := make([]pending, 0, n-1)
	for i := 0; i < n; i++ {
		if i != r {
			recvs = append(recvs, c.post(i, blocks[i], nil))
		}
	}
	for _, pd := range recvs {
		if err := c.wait(ctx, pd); err != nil {
			return err
		}
	}
	return nil
}
