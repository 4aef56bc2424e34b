package distributed

import (
	"context"
	"fmt"
)

// Every collective comes in two forms: a blocking one, and an Async one
// that queues the operation and returns a *Work at once. Until the Work
// is done the group owns the buffers passed to it. Errors in the
// arguments (unsupported types, wrong lengths, bad roots) are returned
// before anything is sent; they are programming errors of this rank only,
// so they do not poison the group.

// AllReduce reduces buf element-wise across all ranks with op and leaves
// the result in buf on every rank, bit-identical everywhere. buf is
// []float32, []float64, []int32 or []int64.
func (g *Group) AllReduce(ctx context.Context, buf any, op ReduceOp) error {
	return g.allReduceStart(ctx, true, buf, op).wait()
}

// AllReduceAsync is the asynchronous AllReduce.
func (g *Group) AllReduceAsync(ctx context.Context, buf any, op ReduceOp) *Work {
	return g.allReduceStart(ctx, false, buf, op)
}

func (g *Group) allReduceStart(ctx context.Context, sync bool, buf any, op ReduceOp) *Work {
	b, err := view(buf)
	if err != nil {
		return failed(err)
	}
	if !op.valid() {
		return failed(fmt.Errorf("distributed: allreduce: unknown reduce op %d", int(op)))
	}
	d := opDesc{kind: opAllReduce, dt: b.dt, count: b.n, red: op, root: -1, peer: -1}
	return g.submit(ctx, sync, d, func(ctx context.Context, c *comm) error {
		return g.runAllReduce(ctx, c, b, op)
	})
}

// allReduceAlgo picks the algorithm for nbytes.
func (g *Group) allReduceAlgo(nbytes int) string {
	if g.arena != nil {
		return AlgoShm
	}
	if g.hierarchical() {
		return AlgoHierarchical
	}
	if g.cfg.AllReduceAlgo != AlgoAuto && g.cfg.AllReduceAlgo != AlgoShm {
		return g.cfg.AllReduceAlgo
	}
	return flatAllReduceAlgo(nbytes, g.size)
}

// flatAllReduceAlgo picks between recursive doubling and the ring for an
// allreduce of nbytes among n ranks.
func flatAllReduceAlgo(nbytes, n int) string {
	// Recursive doubling moves the whole buffer log2(n) times but takes
	// only log2(n) latencies; the ring moves 2(n-1)/n of it in 2(n-1)
	// pipelined steps. The crossover was measured with gotrain bench.
	limit := doublingMaxBytes
	if n == 2 {
		limit = doublingMaxBytes2
	}
	if nbytes <= limit {
		return AlgoRecursiveDoubling
	}
	return AlgoRing
}

// The largest allreduce run by recursive doubling in auto mode: with 2
// ranks both algorithms are one exchange and the ring's segments win from
// 64 KiB on; with more ranks doubling's fewer steps win up to ~128 KiB
// (gotrain bench allreduce --algo, 2 and 4 ranks on 2 cores).
const (
	doublingMaxBytes2 = 32 << 10
	doublingMaxBytes  = 128 << 10
)

func (g *Group) runAllReduce(ctx context.Context, c *comm, b flat, op ReduceOp) error {
	if c.size() == 1 || b.n == 0 {
		finish(b.dt, op, b.bytes, c.size())
		return nil
	}
	reduce := reducer(b.dt, op)
	fin := func(seg []byte) { finish(b.dt, op, seg, c.size()) }
	algo := g.allReduceAlgo(len(b.bytes))
	g.ranAlgo = algo
	switch algo {
	case AlgoShm:
		return g.allReduceShm(ctx, c, b.bytes, reduce, fin)
	case AlgoHierarchical:
		return g.allReduceHier(ctx, c, b.bytes, b.dt.size(), reduce, fin)
	case AlgoRecursiveDoubling:
		return allReduceDoubling(ctx, c, b.bytes, b.dt.size(), reduce, fin)
	}
	return allReduceRing(ctx, c, b.bytes, b.dt.size(), reduce, fin)
}

// Broadcast copies root's buf into buf on every other rank.
func (g *Group) Broadcast(ctx context.Context, buf any, root int) error {
	return g.broadcastStart(ctx, true, buf, root).wait()
}

// BroadcastAsync is the asynchronous Broadcast.
func (g *Group) BroadcastAsync(ctx context.Context, buf any, root int) *Work {
	return g.broadcastStart(ctx, false, buf, root)
}

func (g *Group) broadcastStart(ctx context.Context, sync bool, buf any, root int) *Work {
	b, err := view(buf)
	if err != nil {
		return failed(err)
	}
	if err := g.checkRank("broadcast", "root", root); err != nil {
		return failed(err)
	}
	d := opDesc{kind: opBroadcast, dt: b.dt, count: b.n, root: root, peer: -1}
	return g.submit(ctx, sync, d, func(ctx context.Context, c *comm) error {
		if c.size() == 1 || b.n == 0 {
			return nil
		}
		if g.hierarchical() {
			return g.broadcastHier(ctx, c, b.bytes, b.dt.size(), root)
		}
		return broadcastTree(ctx, c, b.bytes, b.dt.size(), root)
	})
}

// Reduce reduces buf across ranks with op into buf on root. Other ranks'
// buffers are left unchanged.
func (g *Group) Reduce(ctx context.Context, buf any, root int, op ReduceOp) error {
	return g.reduceStart(ctx, true, buf, root, op).wait()
}

// ReduceAsync is the asynchronous Reduce.
func (g *Group) ReduceAsync(ctx context.Context, buf any, root int, op ReduceOp) *Work {
	return g.reduceStart(ctx, false, buf, root, op)
}

func (g *Group) reduceStart(ctx context.Context, sync bool, buf any, root int, op ReduceOp) *Work {
	b, err := view(buf)
	if err != nil {
		return failed(err)
	}
	if err := g.checkRank("reduce", "root", root); err != nil {
		return failed(err)
	}
	if !op.valid() {
		return failed(fmt.Errorf("distributed: reduce: unknown reduce op %d", int(op)))
	}
	d := opDesc{kind: opReduce, dt: b.dt, count: b.n, red: op, root: root, peer: -1}
	return g.submit(ctx, sync, d, func(ctx context.Context, c *comm) error {
		if c.size() == 1 || b.n == 0 {
			finish(b.dt, op, b.bytes, c.size())
			return nil
		}
		fin := func(seg []byte) { finish(b.dt, op, seg, c.size()) }
		return reduceChain(ctx, c, b.bytes, b.dt.size(), root, reducer(b.dt, op), fin)
	})
}

// AllGather concatenates every rank's src, in rank order, into dst on
// every rank. len(dst) must be Size()*len(src), of the same type.
func (g *Group) AllGather(ctx context.Context, dst, src any) error {
	return g.allGatherStart(ctx, true, dst, src).wait()
}

// AllGatherAsync is the asynchronous AllGather.
func (g *Group) AllGatherAsync(ctx context.Context, dst, src any) *Work {
	return g.allGatherStart(ctx, false, dst, src)
}

func (g *Group) allGatherStart(ctx context.Context, sync bool, dst, src any) *Work {
	d, s, err := g.views("allgather", dst, src, g.size)
	if err != nil {
		return failed(err)
	}
	desc := opDesc{kind: opAllGather, dt: s.dt, count: s.n, root: -1, peer: -1}
	return g.submit(ctx, sync, desc, func(ctx context.Context, c *comm) error {
		blocks := split(d.bytes, c.size())
		copy(blocks[c.rank()], s.bytes)
		if c.size() == 1 || s.n == 0 {
			return nil
		}
		if g.hierarchical() {
			return g.allGatherHier(ctx, c, d.bytes, s.bytes, d.dt.size())
		}
		return ring(ctx, c, blocks, d.dt.size(), ringSpec{offset: 0, steps: c.size() - 1})
	})
}

// Gather concatenates every rank's src, in rank order, into dst on root.
// dst is only used on root (len Size()*len(src)); other ranks may pass
// nil.
func (g *Group) Gather(ctx context.Context, dst, src any, root int) error {
	return g.gatherStart(ctx, true, dst, src, root).wait()
}

// GatherAsync is the asynchronous Gather.
func (g *Group) GatherAsync(ctx context.Context, dst, src any, root int) *Work {
	return g.gatherStart(ctx, false, dst, src, root)
}

func (g *Group) gatherStart(ctx context.Context, sync bool, dst, src any, root int) *Work {
	if err := g.checkRank("gather", "root", root); err != nil {
		return failed(err)
	}
	var d, s flat
	var err error
	if g.rank == root {
		d, s, err = g.views("gather", dst, src, g.size)
	} else {
		s, err = view(src)
	}
	if err != nil {
		return failed(err)
	}
	desc := opDesc{kind: opGather, dt: s.dt, count: s.n, root: root, peer: -1}
	return g.submit(ctx, sync, desc, func(ctx context.Context, c *comm) error {
		return gatherDirect(ctx, c, d.bytes, s.bytes, root)
	})
}

// Scatter sends block i of root's src to rank i's dst. src is only used
// on root (len Size()*len(dst)); other ranks may pass nil.
func (g *Group) Scatter(ctx context.Context, dst, src any, root int) error {
	return g.scatterStart(ctx, true, dst, src, root).wait()
}

// ScatterAsync is the asynchronous Scatter.
func (g *Group) ScatterAsync(ctx context.Context, dst, src any, root int) *Work {
	return g.scatterStart(ctx, false, dst, src, root)
}

func (g *Group) scatterStart(ctx context.Context, sync bool, dst, src any, root int) *Work {
	if err := g.checkRank("scatter", "root", root); err != nil {
		return failed(err)
	}
	var d, s flat
	var err error
	if g.rank == root {
		s, d, err = g.views("scatter", src, dst, g.size)
	} else {
		d, err = view(dst)
	}
	if err != nil {
		return failed(err)
	}
	desc := opDesc{kind: opScatter, dt: d.dt, count: d.n, root: root, peer: -1}
	return g.submit(ctx, sync, desc, func(ctx context.Context, c *comm) error {
		return scatterDirect(ctx, c, d.bytes, s.bytes, root)
	})
}

// ReduceScatter reduces src across ranks with op and leaves block Rank()
// of the result in dst. len(src) must be Size()*len(dst). src is not
// modified.
func (g *Group) ReduceScatter(ctx context.Context, dst, src any, op ReduceOp) error {
	return g.reduceScatterStart(ctx, true, dst, src, op).wait()
}

// ReduceScatterAsync is the asynchronous ReduceScatter.
func (g *Group) ReduceScatterAsync(ctx context.Context, dst, src any, op ReduceOp) *Work {
	return g.reduceScatterStart(ctx, false, dst, src, op)
}

func (g *Group) reduceScatterStart(ctx context.Context, sync bool, dst, src any, op ReduceOp) *Work {
	s, d, err := g.views("reduce_scatter", src, dst, g.size)
	if err != nil {
		return failed(err)
	}
	if !op.valid() {
		return failed(fmt.Errorf("distributed: reduce_scatter: unknown reduce op %d", int(op)))
	}
	desc := opDesc{kind: opReduceScatter, dt: d.dt, count: d.n, red: op, root: -1, peer: -1}
	return g.submit(ctx, sync, desc, func(ctx context.Context, c *comm) error {
		n := c.size()
		if n == 1 || d.n == 0 {
			copy(d.bytes, s.bytes)
			finish(d.dt, op, d.bytes, n)
			return nil
		}
		if g.hierarchical() {
			if err := g.reduceScatterHier(ctx, c, d.bytes, s.bytes, d.dt.size(), reducer(d.dt, op)); err != nil {
				return err
			}
			finish(d.dt, op, d.bytes, n)
			return nil
		}
		work := append([]byte(nil), s.bytes...)
		blocks := split(work, n)
		err := ring(ctx, c, blocks, d.dt.size(), ringSpec{
			offset: -1, steps: n - 1, reduceSteps: n - 1, reduce: reducer(d.dt, op),
		})
		if err != nil {
			return err
		}
		copy(d.bytes, blocks[c.rank()])
		finish(d.dt, op, d.bytes, n)
		return nil
	})
}

// AllToAll sends block j of src to rank j, which stores it as block
// Rank() of its dst. src and dst have the same type and length, a
// multiple of Size().
func (g *Group) AllToAll(ctx context.Context, dst, src any) error {
	return g.allToAllStart(ctx, true, dst, src).wait()
}

// AllToAllAsync is the asynchronous AllToAll.
func (g *Group) AllToAllAsync(ctx context.Context, dst, src any) *Work {
	return g.allToAllStart(ctx, false, dst, src)
}

func (g *Group) allToAllStart(ctx context.Context, sync bool, dst, src any) *Work {
	d, s, err := g.views("alltoall", dst, src, 1)
	if err != nil {
		return failed(err)
	}
	if s.n%g.size != 0 {
		return failed(fmt.Errorf("distributed: alltoall: length %d is not a multiple of the group size %d", s.n, g.size))
	}
	desc := opDesc{kind: opAllToAll, dt: s.dt, count: s.n, root: -1, peer: -1}
	return g.submit(ctx, sync, desc, func(ctx context.Context, c *comm) error {
		return allToAllDirect(ctx, c, d.bytes, s.bytes)
	})
}

// Barrier returns once every rank has entered it.
func (g *Group) Barrier(ctx context.Context) error {
	return g.barrierStart(ctx, true).wait()
}

// BarrierAsync is the asynchronous Barrier.
func (g *Group) BarrierAsync(ctx context.Context) *Work {
	return g.barrierStart(ctx, false)
}

func (g *Group) barrierStart(ctx context.Context, sync bool) *Work {
	return g.submit(ctx, sync, opDesc{kind: opBarrier, root: -1, peer: -1}, barrierDissemination)
}

// wait is Wait for the blocking forms: the operation is bounded by the
// caller's context already, so it waits until the group lets go of the
// buffers.
func (w *Work) wait() error {
	<-w.done
	return w.err
}

func (g *Group) checkRank(op, what string, r int) error {
	if r < 0 || r >= g.size {
		return fmt.Errorf("distributed: %s: %s %d is outside the group of size %d", op, what, r, g.size)
	}
	return nil
}

// views checks that big is factor×len(small) elements of small's type.
func (g *Group) views(op string, big, small any, factor int) (flat, flat, error) {
	b, err := view(big)
	if err != nil {
		return flat{}, flat{}, fmt.Errorf("distributed: %s: %w", op, err)
	}
	s, err := view(small)
	if err != nil {
		return flat{}, flat{}, fmt.Errorf("distributed: %s: %w", op, err)
	}
	if b.dt != s.dt {
		return flat{}, flat{}, fmt.Errorf("distributed: %s: buffers of different types %v and %v", op, b.dt, s.dt)
	}
	if b.n != factor*s.n {
		return flat{}, flat{}, fmt.Errorf("distributed: %s: buffer of %d elements, want %d×%d", op, b.n, factor, s.n)
	}
	return b, s, nil
}

// split cuts b into n equal blocks (len(b) is a multiple of n).
func split(b []byte, n int) [][]byte {
	k := len(b) / n
	blocks := make([][]byte, n)
	for i := range blocks {
		blocks[i] = b[i*k : (i+1)*k : (i+1)*k]
	}
	return blocks
}
