package distributed

import "context"

// barrierDissemination: in round i (i = 1, 2, 4, ... < n) rank r sends an
// empty frame to r+i and waits for one from r-i. After ⌈log2 n⌉ rounds
// every rank has heard, directly or not, from every other.
func barrierDissemination(ctx context.Context, c *comm) error {
	n, r := c.size(), c.rank()
	var recvs []pending
	for i := 1; i < n; i <<= 1 {
		recvs = append(recvs, c.post((r-i+n)%n, nil, nil))
	}
	k := 0
	for i := 1; i < n; i <<= 1 {
		if err := c.send(ctx, (r+i)%n, nil); err != nil {
			return err
		}
		if err := c.wait(ctx, recvs[k]); err != nil {
			return err
		}
		k++
	}
	return nil
}
