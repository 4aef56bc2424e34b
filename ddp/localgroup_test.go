package ddp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gotrain/gotrain/distributed"
)

// hub joins n in-process ranks: each collective is an exchange in which
// every rank deposits its input and, once all have, reads all inputs. It
// lets the Reducer be tested without a network; the multi-process tests
// use the real distributed package.
type hub struct {
	n         int
	mu        sync.Mutex
	cond      *sync.Cond
	slots     []any
	arrived   int
	gen       int
	published []any
	broken    error
}

func newHub(n int) *hub {
	h := &hub{n: n, slots: make([]any, n)}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *hub) exchange(rank int, v any) ([]any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.broken != nil {
		return nil, h.broken
	}
	h.slots[rank] = v
	h.arrived++
	gen := h.gen
	if h.arrived == h.n {
		h.published = append([]any(nil), h.slots...)
		h.arrived = 0
		h.gen++
		h.cond.Broadcast()
	}
	for h.gen == gen && h.broken == nil {
		h.cond.Wait()
	}
	if h.gen == gen {
		return nil, h.broken
	}
	return h.published, nil
}

func (h *hub) breakAll(err error) {
	h.mu.Lock()
	h.broken = err
	h.cond.Broadcast()
	h.mu.Unlock()
}

// localGroup is one rank's view of a hub; it implements Group.
type localGroup struct {
	h    *hub
	rank int
}

func newLocalGroups(n int) []*localGroup {
	h := newHub(n)
	gs := make([]*localGroup, n)
	for r := range gs {
		gs[r] = &localGroup{h: h, rank: r}
	}
	return gs
}

func (g *localGroup) Rank() int { return g.rank }
func (g *localGroup) Size() int { return g.h.n }

// SharedMemory reports false: the hub is not a shared-memory transport.
func (g *localGroup) SharedMemory() bool { return false }

func (g *localGroup) AllReduce(ctx context.Context, buf any, op distributed.ReduceOp) error {
	b, ok := buf.([]float32)
	if !ok {
		return fmt.Errorf("localGroup: AllReduce of %T", buf)
	}
	if op != distributed.Sum && op != distributed.Avg {
		return errors.New("localGroup: only Sum and Avg")
	}
	all, err := g.h.exchange(g.rank, append([]float32(nil), b...))
	if err != nil {
		return err
	}
	clear(b)
	for _, v := range all { // rank order: identical on every rank
		for i, x := range v.([]float32) {
			b[i] += x
		}
	}
	if op == distributed.Avg {
		for i := range b {
			b[i] /= float32(g.h.n)
		}
	}
	return nil
}

func (g *localGroup) Broadcast(ctx context.Context, buf any, root int) error {
	var mine any
	switch b := buf.(type) {
	case []float32:
		mine = append([]float32(nil), b...)
	case []int64:
		mine = append([]int64(nil), b...)
	default:
		return fmt.Errorf("localGroup: Broadcast of %T", buf)
	}
	all, err := g.h.exchange(g.rank, mine)
	if err != nil {
		return err
	}
	switch b := buf.(type) {
	case []float32:
		copy(b, all[root].([]float32))
	case []int64:
		copy(b, all[root].([]int64))
	}
	return nil
}

func (g *localGroup) AllGather(ctx context.Context, dst, src any) error {
	var mine any
	switch s := src.(type) {
	case []int64:
		mine = append([]int64(nil), s...)
	case []int32:
		mine = append([]int32(nil), s...)
	default:
		return fmt.Errorf("localGroup: AllGather of %T", src)
	}
	all, err := g.h.exchange(g.rank, mine)
	if err != nil {
		return err
	}
	switch d := dst.(type) {
	case []int64:
		off := 0
		for _, v := range all {
			off += copy(d[off:], v.([]int64))
		}
	case []int32:
		off := 0
		for _, v := range all {
			off += copy(d[off:], v.([]int32))
		}
	}
	return nil
}
