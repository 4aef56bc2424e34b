package distributed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
)

// elem is the reference arithmetic of the tests: values are small
// integers, so float sums and products are exact and the float64/int64
// reference is the truth.
type elem interface {
	~float32 | ~float64 | ~int32 | ~int64
}

// value is rank r's element i for op: in [-5, 5], or [1, 3] for Prod so
// products of five ranks stay small.
func value(r, i int, op ReduceOp) int64 {
	if op == Prod {
		return int64((r+i)%3 + 1)
	}
	return int64((r*7+i*3)%11) - 5
}

func fill[T elem](b []T, r int, op ReduceOp) {
	for i := range b {
		b[i] = T(value(r, i, op))
	}
}

// reference reduces value(·, i, op) over n ranks in float64 (exact here)
// and applies Avg like the implementation: multiply by 1/n for floats,
// truncating division for ints.
func reference[T elem](n, i int, op ReduceOp) T {
	acc := value(0, i, op)
	for r := 1; r < n; r++ {
		v := value(r, i, op)
		switch op {
		case Sum, Avg:
			acc += v
		case Prod:
			acc *= v
		case Min:
			acc = min(acc, v)
		case Max:
			acc = max(acc, v)
		}
	}
	if op == Avg {
		var z T
		switch any(z).(type) {
		case float32:
			return T(float32(acc) * (1 / float32(n)))
		case float64:
			return T(float64(acc) * (1 / float64(n)))
		}
		return T(acc / int64(n))
	}
	return T(acc)
}

func check[T elem](what string, got []T, want func(i int) T) error {
	for i, g := range got {
		w := want(i)
		if !near(float64(g), float64(w)) {
			return fmt.Errorf("%s: element %d of %d = %v, want %v", what, i, len(got), g, w)
		}
	}
	return nil
}

// near compares with a relative tolerance of 1e-6 (Avg on floats may
// round differently from the reference); integers are exact.
func near(a, b float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b))
}

var allOps = []ReduceOp{Sum, Avg, Min, Max, Prod}

// exercise runs every collective on T at count elements and checks the
// results. full selects every reduce op and root; otherwise one each.
func exercise[T elem](ctx context.Context, g *Group, count int, full bool) error {
	n, r := g.Size(), g.Rank()
	name := fmt.Sprintf("%T count=%d world=%d", T(0), count, n)
	ops, roots := allOps, make([]int, n)
	for i := range roots {
		roots[i] = i
	}
	if !full {
		ops, roots = []ReduceOp{Sum, Max}, []int{n - 1}
	}
	algos := []string{AlgoRing, AlgoRecursiveDoubling}
	if g.SharedMemory() {
		// The arena takes every allreduce, whatever algorithm is set.
		algos = []string{AlgoShm}
	}
	for _, algo := range algos {
		g.cfg.AllReduceAlgo = algo // read by the worker after submit
		for _, op := range ops {
			buf := make([]T, count)
			fill(buf, r, op)
			if err := g.AllReduce(ctx, buf, op); err != nil {
				return err
			}
			what := fmt.Sprintf("%s allreduce %v %s", name, op, algo)
			if err := ranAlgo(g, what, count, algo); err != nil {
				return err
			}
			if err := check(what, buf, func(i int) T { return reference[T](n, i, op) }); err != nil {
				return err
			}
		}
	}
	g.cfg.AllReduceAlgo = AlgoAuto
	for _, root := range roots {
		buf := make([]T, count)
		fill(buf, r, Sum)
		if err := g.Broadcast(ctx, buf, root); err != nil {
			return err
		}
		if err := check(fmt.Sprintf("%s broadcast root %d", name, root), buf, func(i int) T { return T(value(root, i, Sum)) }); err != nil {
			return err
		}
		for _, op := range ops {
			buf := make([]T, count)
			fill(buf, r, op)
			if err := g.Reduce(ctx, buf, root, op); err != nil {
				return err
			}
			want := func(i int) T { return T(value(r, i, op)) } // non-roots unchanged
			if r == root {
				want = func(i int) T { return reference[T](n, i, op) }
			}
			if err := check(fmt.Sprintf("%s reduce %v root %d", name, op, root), buf, want); err != nil {
				return err
			}
		}
		// Gather and Scatter: block j is rank j's data.
		src := make([]T, count)
		fill(src, r, Sum)
		var dst []T
		if r == root {
			dst = make([]T, n*count)
		}
		if err := g.Gather(ctx, dst, src, root); err != nil {
			return err
		}
		if r == root {
			if err := check(fmt.Sprintf("%s gather root %d", name, root), dst, func(i int) T { return T(value(i/count, i%count, Sum)) }); err != nil {
				return err
			}
		}
		var all []T
		if r == root {
			all = make([]T, n*count)
			for i := range all {
				all[i] = T(value(i/count+10, i%count, Sum))
			}
		}
		part := make([]T, count)
		if err := g.Scatter(ctx, part, all, root); err != nil {
			return err
		}
		if err := check(fmt.Sprintf("%s scatter root %d", name, root), part, func(i int) T { return T(value(r+10, i, Sum)) }); err != nil {
			return err
		}
	}
	// AllGather.
	src := make([]T, count)
	fill(src, r, Sum)
	dst := make([]T, n*count)
	if err := g.AllGather(ctx, dst, src); err != nil {
		return err
	}
	if err := check(name+" allgather", dst, func(i int) T { return T(value(i/count, i%count, Sum)) }); err != nil {
		return err
	}
	// ReduceScatter: src index j*count+i has value(r, j*count+i).
	for _, op := range ops {
		big := make([]T, n*count)
		fill(big, r, op)
		out := make([]T, count)
		if err := g.ReduceScatter(ctx, out, big, op); err != nil {
			return err
		}
		if err := check(fmt.Sprintf("%s reduce_scatter %v", name, op), out, func(i int) T { return reference[T](n, r*count+i, op) }); err != nil {
			return err
		}
	}
	// AllToAll: rank r's block j holds 100*r+j+i; rank r receives in
	// block j what rank j had in block r.
	if count > 0 {
		per := (count + n - 1) / n
		a2aSrc, a2aDst := make([]T, per*n), make([]T, per*n)
		for i := range a2aSrc {
			a2aSrc[i] = T(100*r + i/per + i%per%7)
		}
		if err := g.AllToAll(ctx, a2aDst, a2aSrc); err != nil {
			return err
		}
		if err := check(name+" alltoall", a2aDst, func(i int) T { return T(100*(i/per) + r + i%per%7) }); err != nil {
			return err
		}
	}
	// Send/Recv around the ring with two tags received in reverse order.
	if n > 1 {
		right, left := (r+1)%n, (r+n-1)%n
		a, b := make([]T, count), make([]T, count)
		fill(a, r, Sum)
		fill(b, r+1, Sum)
		wa := g.SendAsync(ctx, a, right, 1)
		wb := g.SendAsync(ctx, b, right, 2)
		ra, rb := make([]T, count), make([]T, count)
		if err := g.Recv(ctx, rb, left, 2); err != nil {
			return err
		}
		if err := g.Recv(ctx, ra, left, 1); err != nil {
			return err
		}
		if err := errors.Join(wa.Wait(ctx), wb.Wait(ctx)); err != nil {
			return err
		}
		if err := check(name+" recv tag 1", ra, func(i int) T { return T(value(left, i, Sum)) }); err != nil {
			return err
		}
		if err := check(name+" recv tag 2", rb, func(i int) T { return T(value(left+1, i, Sum)) }); err != nil {
			return err
		}
	}
	return g.Barrier(ctx)
}

func TestCollectives(t *testing.T) {
	sizes := []int{0, 1, 7, 1000}
	big := 1000003
	if raceEnabled || testing.Short() {
		big = 70001
	}
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprintf("world%d", n), func(t *testing.T) {
			runGroup(t, n, nil, func(ctx context.Context, g *Group) error {
				for _, count := range sizes {
					if err := errors.Join(
						exercise[float32](ctx, g, count, true),
						exercise[float64](ctx, g, count, true),
						exercise[int32](ctx, g, count, true),
						exercise[int64](ctx, g, count, true),
					); err != nil {
						return err
					}
				}
				// The large size: every op on float32 and int64, fewer roots.
				return errors.Join(
					exercise[float32](ctx, g, big, false),
					exercise[int64](ctx, g, big, false),
				)
			})
		})
	}
}

// TestCollectivesTCPOnly runs a subset with the shared-memory ring off,
// as between hosts.
func TestCollectivesTCPOnly(t *testing.T) {
	t.Setenv("GOTRAIN_SHM", "0")
	big := 300001
	if raceEnabled {
		big = 20001
	}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("world%d", n), func(t *testing.T) {
			runGroup(t, n, nil, func(ctx context.Context, g *Group) error {
				return errors.Join(
					exercise[float32](ctx, g, 7, true),
					exercise[float64](ctx, g, big, false),
					exercise[int32](ctx, g, big, false),
				)
			})
		})
	}
}

// ranAlgo checks that the allreduce g just ran on count elements used
// algo. An allreduce that moves nothing (one rank, no elements) runs no
// algorithm.
func ranAlgo(g *Group, what string, count int, algo string) error {
	if g.Size() == 1 || count == 0 {
		return nil
	}
	if g.ranAlgo != algo {
		return fmt.Errorf("%s: ran the %q algorithm", what, g.ranAlgo)
	}
	return nil
}

// TestAllReduceBitIdentical: with values whose sums round, every rank
// still ends with the same bits (DDP relies on it: replicas must not
// drift), for every algorithm and world size. The algorithm is chosen
// through Config, as a user would: forcing ring or recursive doubling
// leaves the shared-memory arena out.
func TestAllReduceBitIdentical(t *testing.T) {
	for _, algo := range []string{AlgoRing, AlgoRecursiveDoubling, AlgoShm} {
		for n := 2; n <= 5; n++ {
			t.Run(fmt.Sprintf("%s/world%d", algo, n), func(t *testing.T) {
				var noArena atomic.Bool
				runGroup(t, n, func(c *Config) { c.AllReduceAlgo = algo }, func(ctx context.Context, g *Group) error {
					if g.SharedMemory() != (algo == AlgoShm) {
						if algo == AlgoShm {
							noArena.Store(true) // every rank agrees: none has it
							return nil
						}
						return fmt.Errorf("%s: the shared-memory arena is set up", algo)
					}
					const count = 100003
					buf := make([]float32, count)
					for i := range buf {
						buf[i] = float32(math.Sin(float64(i*(g.Rank()+3)))) * 1e-3 * float32(g.Rank()+1)
					}
					if err := g.AllReduce(ctx, buf, Avg); err != nil {
						return err
					}
					if err := ranAlgo(g, "allreduce", count, algo); err != nil {
						return err
					}
					all := make([]float32, n*count)
					if err := g.AllGather(ctx, all, buf); err != nil {
						return err
					}
					for r := 1; r < n; r++ {
						for i := 0; i < count; i++ {
							if math.Float32bits(all[r*count+i]) != math.Float32bits(all[i]) {
								return fmt.Errorf("%s: rank %d element %d = %v, rank 0 has %v", algo, r, i, all[r*count+i], all[i])
							}
						}
					}
					return nil
				})
				if noArena.Load() {
					t.Skip("no shared-memory arena on this host (see GOTRAIN_SHM)")
				}
			})
		}
	}
}

// TestAllReduceAlgoAuto: without the arena, auto runs recursive doubling
// up to the measured crossover size and the ring above it.
func TestAllReduceAlgoAuto(t *testing.T) {
	t.Setenv("GOTRAIN_SHM", "0")
	for _, n := range []int{2, 3} {
		limit := doublingMaxBytes
		if n == 2 {
			limit = doublingMaxBytes2
		}
		t.Run(fmt.Sprintf("world%d", n), func(t *testing.T) {
			runGroup(t, n, nil, func(ctx context.Context, g *Group) error {
				for _, c := range []struct {
					count int
					algo  string
				}{{1, AlgoRecursiveDoubling}, {limit / 4, AlgoRecursiveDoubling}, {limit/4 + 1, AlgoRing}} {
					buf := make([]float32, c.count)
					if err := g.AllReduce(ctx, buf, Sum); err != nil {
						return err
					}
					if err := ranAlgo(g, fmt.Sprintf("auto allreduce of %d bytes", 4*c.count), c.count, c.algo); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
