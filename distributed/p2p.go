package distributed

import (
	"context"
	"fmt"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// Point-to-point messages do not take part in the collective sequence:
// they run beside it, matched by (peer, tag) like MPI's and PyTorch's.
// Messages between the same two ranks with the same tag arrive in the
// order they were sent.

// Send sends buf to rank dst with tag; it returns once buf may be
// reused. The receiver's Recv must have the same type, length and tag.
func (g *Group) Send(ctx context.Context, buf any, dst int, tag int64) error {
	return g.SendAsync(ctx, buf, dst, tag).wait()
}

// SendAsync is the asynchronous Send.
func (g *Group) SendAsync(ctx context.Context, buf any, dst int, tag int64) *Work {
	b, err := view(buf)
	if err != nil {
		return failed(err)
	}
	if err := g.checkPeer("send", dst); err != nil {
		return failed(err)
	}
	d := opDesc{kind: opSend, dt: b.dt, count: b.n, root: -1, peer: dst, tag: tag}
	return g.startP2P(ctx, d, func(ctx context.Context, c *comm) error {
		return c.send(ctx, dst, b.bytes)
	})
}

// Recv receives into buf the message rank src sent with tag.
func (g *Group) Recv(ctx context.Context, buf any, src int, tag int64) error {
	return g.RecvAsync(ctx, buf, src, tag).wait()
}

// RecvAsync is the asynchronous Recv.
func (g *Group) RecvAsync(ctx context.Context, buf any, src int, tag int64) *Work {
	b, err := view(buf)
	if err != nil {
		return failed(err)
	}
	if err := g.checkPeer("recv", src); err != nil {
		return failed(err)
	}
	d := opDesc{kind: opRecv, dt: b.dt, count: b.n, root: -1, peer: src, tag: tag}
	return g.startP2P(ctx, d, func(ctx context.Context, c *comm) error {
		r := transport.NewRecv(c.hdr, b.bytes, nil)
		c.posted = append(c.posted, r)
		c.g.mesh.Pair(src).PostP2P(r)
		return c.wait(ctx, pending{r: r, peer: src})
	})
}

func (g *Group) checkPeer(op string, peer int) error {
	if err := g.checkRank(op, "peer", peer); err != nil {
		return err
	}
	if peer == g.rank {
		return fmt.Errorf("distributed: %s: peer %d is this rank", op, peer)
	}
	return nil
}

// startP2P runs a point-to-point operation on its own goroutine, which
// Destroy waits for.
func (g *Group) startP2P(ctx context.Context, d opDesc, run func(ctx context.Context, c *comm) error) *Work {
	w := &Work{ctx: ctx, op: d, run: run, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		w.err = g.opError(&w.op, ErrGroupClosed, ErrGroupClosed)
		close(w.done)
		return w
	}
	g.p2p.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.p2p.Done()
		w.err = g.execute(w)
		close(w.done)
	}()
	return w
}
