package distributed

import (
	"context"
	"slices"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// Hierarchical collectives split the group by node (see topology): each
// runs an intra-node phase among a node's ranks, an inter-node phase among
// one rank per node (its leader, the node's lowest rank), and a second
// intra-node phase, all over the group's own connections (same-host pairs
// go through shared memory, see package shm) and under the operation's
// sequence number. So the network between nodes carries the traffic of a
// group of as many ranks as there are nodes, whatever the ranks per node;
// a lost peer fails the group's mesh, and so the operation on every rank,
// as in any other algorithm; and the order of every reduction is fixed by
// the topology, so every rank ends with the same bits, run after run.

// hierarchical reports whether the group's collectives run hierarchically:
// when forced, or in auto mode when the group spans several nodes with
// several ranks on some node (a group whose ranks all share this host
// uses the shared-memory arena instead).
func (g *Group) hierarchical() bool {
	switch g.cfg.AllReduceAlgo {
	case AlgoHierarchical:
		return true
	case AlgoAuto:
		return g.arena == nil && g.topo.multiNode()
	}
	return false
}

// AllReduceAlgorithm returns the algorithm an allreduce of nbytes bytes
// runs on this group: AlgoShm, AlgoHierarchical, AlgoRing or
// AlgoRecursiveDoubling.
func (g *Group) AllReduceAlgorithm(nbytes int) string {
	return g.allReduceAlgo(nbytes)
}

// allReduceHier reduces buf along a chain inside each node into its
// leader, allreduces among the leaders (recursive doubling or ring, by
// size, as a flat group of that many ranks would), and broadcasts the
// result down a tree inside each node. fin (Avg's division by the whole
// group's size) is applied once, by the leaders.
//
// The leader works chunk by chunk (hierChunkSegs of the chain's
// segments): its receives of the chain are posted at once and reduced by
// the transport as they arrive, so while the leaders allreduce one chunk
// the node reduces the next, and a chunk is broadcast inside the node as
// soon as the leaders are done with it.
func (g *Group) allReduceHier(ctx context.Context, c *comm, buf []byte, elem int, reduce transport.ReduceFunc, fin func([]byte)) error {
	t := g.topo
	node := t.nodes[t.node[g.rank]]
	nseg := segments(len(buf)) // the chain's segmentation (reduceChainInto)
	chunk := func(i int) []byte {
		count := len(buf) / elem
		a, b := i*hierChunkSegs, min((i+1)*hierChunkSegs, nseg)
		return buf[a*count/nseg*elem : b*count/nseg*elem]
	}
	nchunks := (nseg + hierChunkSegs - 1) / hierChunkSegs
	bcast := func(i int) error {
		return c.within(node, func(s *comm) error { return broadcastTree(ctx, s, chunk(i), elem, 0) })
	}
	if g.rank != node[0] {
		// Non-leaders reduce in place: their buffer is overwritten by the
		// broadcast anyway.
		err := c.within(node, func(s *comm) error {
			return reduceChainInto(ctx, s, buf, elem, 0, reduce, func([]byte) {})
		})
		if err != nil {
			return err
		}
		for i := 0; i < nchunks; i++ {
			if err := bcast(i); err != nil {
				return err
			}
		}
		return nil
	}
	var recvs []pending
	if len(node) > 1 {
		// The leader's end of reduceChainInto: the same receives, posted
		// all at once, waited for chunk by chunk.
		c.within(node, func(s *comm) error {
			for j := 0; j < nseg; j++ {
				recvs = append(recvs, s.post(1, segment(buf, elem, nseg, j), reduce))
			}
			return nil
		})
	}
	// The leader broadcasts each finished chunk inside its node on a
	// goroutine of its own, so that the node's copies overlap the
	// leaders' allreduce of the next chunk. It sends only to this node's
	// ranks, on pairs the allreduce among leaders does not use.
	bcast = func(int) error { return nil }
	finish := func(err error) error { return err }
	if len(node) > 1 {
		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		todo, done := make(chan int, nchunks), make(chan error, 1)
		bs := &comm{g: c.g, hdr: c.hdr, members: node, me: 0}
		go func() {
			var err error
			for i := range todo {
				if err == nil {
					err = broadcastTree(bctx, bs, chunk(i), elem, 0)
				}
			}
			done <- err
		}()
		bcast = func(i int) error { todo <- i; return nil }
		finish = func(err error) error {
			if err != nil {
				cancel() // the broadcast must not outlive buf
			}
			close(todo)
			berr := <-done
			c.posted = append(c.posted, bs.posted...)
			if err != nil {
				return err
			}
			return berr
		}
	}
	leaders := t.leaders()
	for i := 0; i < nchunks; i++ {
		for j := i * hierChunkSegs; j < min((i+1)*hierChunkSegs, len(recvs)); j++ {
			if err := c.wait(ctx, recvs[j]); err != nil {
				return finish(err)
			}
		}
		ch := chunk(i)
		if len(leaders) == 1 {
			fin(ch)
		} else {
			err := c.within(leaders, func(s *comm) error {
				if flatAllReduceAlgo(len(ch), len(leaders)) == AlgoRecursiveDoubling {
					return allReduceDoubling(ctx, s, ch, elem, reduce, fin)
				}
				return allReduceRing(ctx, s, ch, elem, reduce, fin)
			})
			if err != nil {
				return finish(err)
			}
		}
		bcast(i)
	}
	return finish(nil)
}

// hierChunkSegs is how many of the chain's segments (segBytes each) the
// hierarchical allreduce hands to the leaders at a time: large enough
// that a leaders' ring moves megabytes per step, small enough that the
// node's reduction and broadcast overlap the network.
const hierChunkSegs = 8

// broadcastHier sends root's buf down a tree of one rank per node (root
// on its node, the leader on the others), then down a tree inside each
// node: every node receives the buffer over the network once.
func (g *Group) broadcastHier(ctx context.Context, c *comm, buf []byte, elem, root int) error {
	t := g.topo
	mine, rootNode := t.node[g.rank], t.node[root]
	heads := t.leaders()
	heads[rootNode] = root
	if g.rank == heads[mine] && len(heads) > 1 {
		err := c.within(heads, func(s *comm) error { return broadcastTree(ctx, s, buf, elem, rootNode) })
		if err != nil {
			return err
		}
	}
	node := t.nodes[mine]
	if len(node) == 1 {
		return nil
	}
	return c.within(node, func(s *comm) error {
		return broadcastTree(ctx, s, buf, elem, slices.Index(node, heads[mine]))
	})
}

// allGatherHier gathers each node's blocks into its leader, runs a ring
// allgather of whole nodes' blocks among the leaders, and broadcasts the
// result inside each node. The phases work on a staging buffer holding
// the blocks node by node, which is dst itself when the ranks of each
// node are consecutive (as launchers number them).
func (g *Group) allGatherHier(ctx context.Context, c *comm, dst, src []byte, elem int) error {
	t := g.topo
	order, pos := t.order()
	per := len(src)
	stage := dst
	identity := slices.IsSorted(order)
	if !identity {
		stage = make([]byte, len(dst))
	}
	regions := nodeRegions(t, stage, per)
	mine := t.node[g.rank]
	node := t.nodes[mine]
	copy(stage[pos[g.rank]*per:], src)
	if len(node) > 1 {
		err := c.within(node, func(s *comm) error { return gatherDirect(ctx, s, regions[mine], src, 0) })
		if err != nil {
			return err
		}
	}
	if g.rank == node[0] && len(t.nodes) > 1 {
		err := c.within(t.leaders(), func(s *comm) error {
			return ring(ctx, s, slices.Clone(regions), elem, ringSpec{offset: 0, steps: len(t.nodes) - 1})
		})
		if err != nil {
			return err
		}
	}
	if len(node) > 1 {
		err := c.within(node, func(s *comm) error { return broadcastTree(ctx, s, stage, elem, 0) })
		if err != nil {
			return err
		}
	}
	if !identity {
		for r := range order {
			copy(dst[r*per:(r+1)*per], stage[pos[r]*per:])
		}
	}
	return nil
}

// reduceScatterHier reduces a copy of src, its blocks node by node, along
// a chain inside each node into the leader, runs a ring reduce-scatter of
// whole nodes' blocks among the leaders, and has each leader scatter its
// node's reduced blocks to the node's ranks. dst gets this rank's block,
// before Avg's division.
func (g *Group) reduceScatterHier(ctx context.Context, c *comm, dst, src []byte, elem int, reduce transport.ReduceFunc) error {
	t := g.topo
	order, _ := t.order()
	per := len(dst)
	stage := make([]byte, len(src))
	for i, r := range order {
		copy(stage[i*per:(i+1)*per], src[r*per:])
	}
	regions := nodeRegions(t, stage, per)
	mine := t.node[g.rank]
	node := t.nodes[mine]
	if len(node) > 1 {
		err := c.within(node, func(s *comm) error {
			return reduceChainInto(ctx, s, stage, elem, 0, reduce, func([]byte) {})
		})
		if err != nil {
			return err
		}
	}
	if g.rank == node[0] && len(t.nodes) > 1 {
		err := c.within(t.leaders(), func(s *comm) error {
			n := len(t.nodes)
			return ring(ctx, s, slices.Clone(regions), elem, ringSpec{offset: -1, steps: n - 1, reduceSteps: n - 1, reduce: reduce})
		})
		if err != nil {
			return err
		}
	}
	if len(node) == 1 {
		copy(dst, regions[mine])
		return nil
	}
	return c.within(node, func(s *comm) error { return scatterDirect(ctx, s, dst, regions[mine], 0) })
}

// nodeRegions cuts stage, per bytes per rank in node order, into one
// region per node.
func nodeRegions(t *topology, stage []byte, per int) [][]byte {
	regions := make([][]byte, len(t.nodes))
	off := 0
	for i, n := range t.nodes {
		end := off + len(n)*per
		regions[i] = stage[off:end:end]
		off = end
	}
	return regions
}
