package distributed

import "context"

// scatterDirect: root sends block i straight to rank i. Root sends (n-1)
// blocks.
func scatterDirect(ctx context.Context, c *comm, dst, src []byte, root int) error {
	n, r := c.size(), c.rank()
	if r != root {
		return c.wait(ctx, c.post(root, dst, nil))
	}
	blocks := split(src, n)
	copy(dst, blocks[r])
	for k := 1; k < n; k++ {
		i := (r + k) % n
		if err := c.send(ctx, i, blocks[i]); err != nil {
			return err
		}
	}
	return nil
}
