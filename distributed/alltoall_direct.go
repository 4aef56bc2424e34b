package distributed

import "context"

// allToAllDirect: every rank posts a receive per peer into its block of
// dst, then sends block j of src to rank j, starting with its right
// neighbour so that the n-1 sends of all ranks spread over all links.
func allToAllDirect(ctx context.Context, c *comm, dst, src []byte) error {
	n, r := c.size(), c.rank()
	in, out := split(dst, n), split(src, n)
	copy(in[r], out[r])
	recvs := make([]pending, 0, n-1)
	for k := 1; k < n; k++ {
		i := (r - k + n) % n
		recvs = append(recvs, c.post(i, in[i], nil))
	}
	for k := 1; k < n; k++ {
		i := (r + k) % n
		if err := c.send(ctx, i, out[i]); err != nil {
			return err
		}
	}
	for _, pd := range recvs {
		if err := c.wait(ctx, pd); err != nil {
			return err
		}
	}
	return nil
}
