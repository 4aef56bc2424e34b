package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// shardHub joins n in-process ranks for the sharded checkpoint tests:
// each collective is an exchange in which every rank deposits a copy of
// its input and, once all have, reads all inputs. Unlike fakeGroup it
// broadcasts from any root, as LoadSharded needs.
type shardHub struct {
	n         int
	mu        sync.Mutex
	cond      *sync.Cond
	slots     [][]int64
	arrived   int
	gen       int
	published [][]int64
}

// shardGroup is one rank's view of a shardHub; it implements Group.
type shardGroup struct {
	h    *shardHub
	rank int
}

// ShardHubGroups returns n in-process ranks joined as one group, for
// the tests of this package and of checkpoint_test.
func ShardHubGroups(n int) []Group {
	h := &shardHub{n: n, slots: make([][]int64, n)}
	h.cond = sync.NewCond(&h.mu)
	gs := make([]Group, n)
	for r := range gs {
		gs[r] = &shardGroup{h: h, rank: r}
	}
	return gs
}

func (h *shardHub) exchange(rank int, v []int64) [][]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.slots[rank] = slices.Clone(v)
	h.arrived++
	gen := h.gen
	if h.arrived == h.n {
		h.published = slices.Clone(h.slots)
		h.arrived = 0
		h.gen++
		h.cond.Broadcast()
	}
	for h.gen == gen {
		h.cond.Wait()
	}
	return h.published
}

func (g *shardGroup) Rank() int { return g.rank }
func (g *shardGroup) Size() int { return g.h.n }

func (g *shardGroup) Broadcast(ctx context.Context, buf any, root int) error {
	b := buf.([]int64)
	all := g.h.exchange(g.rank, b)
	if len(all[root]) != len(b) {
		return fmt.Errorf("shardGroup: rank %d broadcast %d elements into %d", root, len(all[root]), len(b))
	}
	copy(b, all[root])
	return nil
}

func (g *shardGroup) AllGather(ctx context.Context, dst, src any) error {
	d, s := dst.([]int64), src.([]int64)
	all := g.h.exchange(g.rank, s)
	if len(d) != len(s)*g.h.n {
		return fmt.Errorf("shardGroup: all-gather of %d elements into %d", len(s), len(d))
	}
	for r, part := range all {
		if len(part) != len(s) {
			return fmt.Errorf("shardGroup: rank %d gathered %d elements, rank %d %d", r, len(part), g.rank, len(s))
		}
		copy(d[r*len(s):], part)
	}
	return nil
}

// onRanks runs f on every rank of gs at once and returns each rank's
// results.
func onRanks[T any](gs []Group, f func(g Group) (T, error)) ([]T, []error) {
	out := make([]T, len(gs))
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r], errs[r] = f(g)
		}()
	}
	wg.Wait()
	return out, errs
}

// OnRanks is onRanks for checkpoint_test.
func OnRanks[T any](gs []Group, f func(g Group) (T, error)) ([]T, []error) { return onRanks(gs, f) }
