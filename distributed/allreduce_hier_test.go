package distributed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hierLayouts are the node layouts the hierarchical tests fake on this
// host: the node key of each rank. Nodes need not hold consecutive ranks.
var hierLayouts = []struct {
	name string
	keys []string
}{
	{"2x2", []string{"a", "a", "b", "b"}},
	{"3x2", []string{"a", "a", "b", "b", "c", "c"}},
	{"3+1", []string{"a", "a", "a", "b"}},
	{"2+1+1", []string{"a", "a", "b", "c"}},
	{"2x2-interleaved", []string{"a", "b", "a", "b"}},
	{"1+2+1-interleaved", []string{"a", "b", "c", "b"}},
}

// withNodes gives each rank the node key of keys, as if the ranks ran on
// len(distinct keys) machines.
func withNodes(keys []string, algo string) func(*Config) {
	return func(c *Config) {
		c.nodeKey = "node-" + keys[c.Rank]
		c.AllReduceAlgo = algo
	}
}

func TestTopology(t *testing.T) {
	for _, tc := range []struct {
		keys    []string
		nodes   [][]int
		multi   bool
		leaders []int
		order   []int
	}{
		{[]string{"x"}, [][]int{{0}}, false, []int{0}, []int{0}},
		{[]string{"x", "x", "x"}, [][]int{{0, 1, 2}}, false, []int{0}, []int{0, 1, 2}},
		{[]string{"x", "y", "z"}, [][]int{{0}, {1}, {2}}, false, []int{0, 1, 2}, []int{0, 1, 2}},
		{[]string{"x", "x", "y", "y"}, [][]int{{0, 1}, {2, 3}}, true, []int{0, 2}, []int{0, 1, 2, 3}},
		{[]string{"x", "y", "x", "z"}, [][]int{{0, 2}, {1}, {3}}, true, []int{0, 1, 3}, []int{0, 2, 1, 3}},
		{[]string{"y", "x", "y", "y"}, [][]int{{0, 2, 3}, {1}}, true, []int{0, 1}, []int{0, 2, 3, 1}},
	} {
		topo := newTopology(tc.keys)
		order, pos := topo.order()
		if !slices.EqualFunc(topo.nodes, tc.nodes, slices.Equal) || topo.multiNode() != tc.multi ||
			!slices.Equal(topo.leaders(), tc.leaders) || !slices.Equal(order, tc.order) {
			t.Errorf("keys %v: nodes %v multi %v leaders %v order %v, want %v %v %v %v",
				tc.keys, topo.nodes, topo.multiNode(), topo.leaders(), order, tc.nodes, tc.multi, tc.leaders, tc.order)
		}
		for i, r := range order {
			if pos[r] != i || topo.nodes[topo.node[r]][0] != tc.leaders[topo.node[r]] {
				t.Errorf("keys %v: rank %d at position %d in %v, or on the wrong node", tc.keys, r, pos[r], order)
			}
		}
	}
}

// TestHierarchicalAuto: in auto mode, a group whose ranks sit on several
// nodes, some with several ranks, runs every allreduce hierarchically
// (whatever the size) and reports its nodes; one node, or one rank per
// node, does not.
func TestHierarchicalAuto(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		hier bool
	}{
		{[]string{"a", "a", "b", "b"}, true},
		{[]string{"a", "b", "c"}, false},
		{[]string{"a", "a", "a"}, false},
	} {
		t.Run(strings.Join(tc.keys, ""), func(t *testing.T) {
			runGroup(t, len(tc.keys), withNodes(tc.keys, ""), func(ctx context.Context, g *Group) error {
				want := newTopology(tc.keys).nodes
				if got := g.Nodes(); !slices.EqualFunc(got, want, slices.Equal) {
					return fmt.Errorf("Nodes() = %v, want %v", got, want)
				}
				if g.SharedMemory() && len(want) > 1 {
					return errors.New("a group on several nodes set up the shared-memory arena")
				}
				for _, count := range []int{1, 1 << 20} {
					buf := make([]float32, count)
					if err := g.AllReduce(ctx, buf, Sum); err != nil {
						return err
					}
					got := g.AllReduceAlgorithm(4 * count)
					if got != g.ranAlgo {
						return fmt.Errorf("AllReduceAlgorithm(%d) = %q, but %q ran", 4*count, got, g.ranAlgo)
					}
					if (got == AlgoHierarchical) != tc.hier {
						return fmt.Errorf("allreduce of %d bytes ran %q", 4*count, got)
					}
				}
				return nil
			})
		})
	}
}

// TestHierarchicalCollectives runs every collective in every layout with
// the hierarchical algorithms (auto mode picks them), against the
// reference arithmetic: the same checks as TestCollectives, plus the
// hierarchical allreduce itself.
func TestHierarchicalCollectives(t *testing.T) {
	big := 300001 // several segments per block, and leaders on the ring
	if raceEnabled {
		big = 20001
	}
	for _, l := range hierLayouts {
		t.Run(l.name, func(t *testing.T) {
			runGroup(t, len(l.keys), withNodes(l.keys, AlgoAuto), func(ctx context.Context, g *Group) error {
				if !g.hierarchical() {
					return errors.New("not hierarchical")
				}
				var errs []error
				for _, count := range []int{0, 1, 7, 1000} {
					errs = append(errs,
						exerciseHier[float32](ctx, g, count, allOps),
						exerciseHier[float64](ctx, g, count, allOps),
						exerciseHier[int32](ctx, g, count, allOps),
						exerciseHier[int64](ctx, g, count, allOps),
						exercise[float32](ctx, g, count, true),
						exercise[int64](ctx, g, count, false),
					)
				}
				errs = append(errs,
					exerciseHier[float32](ctx, g, big, []ReduceOp{Sum, Avg, Max}),
					exerciseHier[int64](ctx, g, big, []ReduceOp{Sum, Avg, Max}),
					exercise[float64](ctx, g, big, false),
					exercise[int32](ctx, g, big, false),
				)
				return errors.Join(errs...)
			})
		})
	}
}

// exerciseHier runs the hierarchical allreduce of count elements of T
// for each op and checks it against the reference and, for integers,
// bit for bit against the flat ring.
func exerciseHier[T elem](ctx context.Context, g *Group, count int, ops []ReduceOp) error {
	n, r := g.Size(), g.Rank()
	for _, op := range ops {
		what := fmt.Sprintf("%T count=%d world=%d hierarchical allreduce %v", T(0), count, n, op)
		buf := make([]T, count)
		fill(buf, r, op)
		if err := g.AllReduce(ctx, buf, op); err != nil {
			return err
		}
		if err := ranAlgo(g, what, count, AlgoHierarchical); err != nil {
			return err
		}
		if err := check(what, buf, func(i int) T { return reference[T](n, i, op) }); err != nil {
			return err
		}
		var z T
		switch any(z).(type) {
		case int32, int64:
			flat := make([]T, count)
			fill(flat, r, op)
			algo := g.cfg.AllReduceAlgo
			g.cfg.AllReduceAlgo = AlgoRing // read by the worker after submit
			err := g.AllReduce(ctx, flat, op)
			g.cfg.AllReduceAlgo = algo
			if err != nil {
				return err
			}
			if err := ranAlgo(g, what, count, AlgoRing); err != nil {
				return err
			}
			if !slices.Equal(flat, buf) {
				return fmt.Errorf("%s differs from the flat ring's result", what)
			}
		}
	}
	return nil
}

// roundingInput is rank r's element i for the bitwise tests: values whose
// sums round, so that another reduction order gives other bits.
func roundingInput(r, i int) float32 {
	return float32(math.Sin(float64(i*(r+3)+r))) * 1e-3 * float32(r+1)
}

// hierRun allreduces (Sum and Avg) and reduce-scatters rounding inputs
// in layout keys and returns, for every rank, the concatenated results;
// it checks that every rank got the same allreduce bits and that the
// results are within rounding of a float64 reference.
func hierRun(t *testing.T, keys []string, count int) [][]float32 {
	n := len(keys)
	out := make([][]float32, n)
	var mu sync.Mutex
	runGroup(t, n, withNodes(keys, AlgoAuto), func(ctx context.Context, g *Group) error {
		r := g.Rank()
		var res []float32
		for _, op := range []ReduceOp{Sum, Avg} {
			buf := make([]float32, count)
			for i := range buf {
				buf[i] = roundingInput(r, i)
			}
			if err := g.AllReduce(ctx, buf, op); err != nil {
				return err
			}
			if err := ranAlgo(g, "allreduce", count, AlgoHierarchical); err != nil {
				return err
			}
			for i := 0; i < count; i += 7 { // the reference is slow; the bits are all compared below
				v := buf[i]
				want := 0.0
				for q := 0; q < n; q++ {
					want += float64(roundingInput(q, i))
				}
				if op == Avg {
					want /= float64(n)
				}
				if math.Abs(float64(v)-want) > 1e-5*float64(n) {
					return fmt.Errorf("%v element %d = %v, want %v", op, i, v, want)
				}
			}
			all := make([]float32, n*count)
			if err := g.AllGather(ctx, all, buf); err != nil {
				return err
			}
			for q := 1; q < n; q++ {
				for i := 0; i < count; i++ {
					if math.Float32bits(all[q*count+i]) != math.Float32bits(all[i]) {
						return fmt.Errorf("%v: rank %d element %d = %v, rank 0 has %v", op, q, i, all[q*count+i], all[i])
					}
				}
			}
			res = append(res, buf...)
		}
		per := count / n
		src := make([]float32, per*n)
		for i := range src {
			src[i] = roundingInput(r, i)
		}
		dst := make([]float32, per)
		if err := g.ReduceScatter(ctx, dst, src, Sum); err != nil {
			return err
		}
		res = append(res, dst...)
		mu.Lock()
		out[r] = res
		mu.Unlock()
		return nil
	})
	return out
}

// TestHierarchicalBitwiseStable: with values whose sums round, every rank
// ends with the same bits, and two runs of the same job end with the same
// bits (the order of reduction is fixed by the layout).
func TestHierarchicalBitwiseStable(t *testing.T) {
	count := 1100003 // 4.4 MB: the leaders take it in two chunks
	if raceEnabled {
		count = 20003
	}
	for _, l := range hierLayouts[:4] {
		t.Run(l.name, func(t *testing.T) {
			a := hierRun(t, l.keys, count)
			b := hierRun(t, l.keys, count)
			for r := range a {
				if len(a[r]) == 0 || len(a[r]) != len(b[r]) {
					t.Fatalf("rank %d: %d and %d results", r, len(a[r]), len(b[r]))
				}
				for i := range a[r] {
					if math.Float32bits(a[r][i]) != math.Float32bits(b[r][i]) {
						t.Fatalf("rank %d element %d: %v in the first run, %v in the second", r, i, a[r][i], b[r][i])
					}
				}
			}
		})
	}
}

// TestHierarchicalForced: Config.AllReduceAlgo "hierarchical" runs the
// hierarchical algorithms even on one node (a reduce into rank 0 and a
// broadcast) or with one rank per node (the leaders' allreduce alone).
func TestHierarchicalForced(t *testing.T) {
	for _, keys := range [][]string{{"a", "a", "a"}, {"a", "b", "c"}} {
		t.Run(strings.Join(keys, ""), func(t *testing.T) {
			runGroup(t, len(keys), withNodes(keys, AlgoHierarchical), func(ctx context.Context, g *Group) error {
				if g.SharedMemory() {
					return errors.New("a forced hierarchical group set up the shared-memory arena")
				}
				return errors.Join(
					exerciseHier[float32](ctx, g, 1000, allOps),
					exerciseHier[int32](ctx, g, 70001, []ReduceOp{Sum, Avg}),
					exercise[float64](ctx, g, 7, true),
				)
			})
		})
	}
}

// TestHierarchicalAlgoConfig: GOTRAIN_ALLREDUCE_ALGO=hierarchical is
// accepted; an unknown name is refused with the list of names.
func TestHierarchicalAlgoConfig(t *testing.T) {
	t.Setenv("GOTRAIN_ALLREDUCE_ALGO", "hierarchical")
	c := Config{}
	if err := c.resolveAllReduceAlgo(); err != nil || c.AllReduceAlgo != AlgoHierarchical {
		t.Fatalf("GOTRAIN_ALLREDUCE_ALGO=hierarchical: %q, %v", c.AllReduceAlgo, err)
	}
	c = Config{AllReduceAlgo: "hier"}
	err := c.resolveAllReduceAlgo()
	if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `"hierarchical"`) {
		t.Fatalf("AllReduceAlgo %q: %v, want a config error listing \"hierarchical\"", c.AllReduceAlgo, err)
	}
}

// hierKillKeys is the layout of the hier-kill worker: rank 3 (a
// non-leader on the second node) is the victim.
const (
	hierKillKeys   = "a,a,b,b,c"
	hierKillVictim = 3
)

func init() {
	// hier-kill: the kill worker in a faked layout of three nodes.
	workers["hier-kill"] = func() int {
		ctx := context.Background()
		r, _ := strconv.Atoi(os.Getenv("RANK"))
		keys := strings.Split(hierKillKeys, ",")
		g, err := Init(ctx, Config{ConnectTimeout: 20 * time.Second, Timeout: 60 * time.Second, nodeKey: keys[r]})
		if err != nil {
			fmt.Println("init error:", err)
			return 2
		}
		defer g.Destroy()
		buf := make([]float32, 4<<20)
		for i := 0; ; i++ {
			if err := g.AllReduce(ctx, buf, Sum); err != nil {
				fmt.Printf("failed: %v\n", err)
				fmt.Printf("errors.Is(ErrPeerLost)=%v\n", errors.Is(err, ErrPeerLost))
				return 1
			}
			if i == 0 {
				fmt.Printf("ready %s\n", g.ranAlgo)
			}
		}
	}
}

// TestHierarchicalKill: SIGKILL a non-leader during hierarchical
// allreduces; every other rank, on its node or not, leader or not, fails
// with ErrPeerLost naming the dead rank by its number in the group.
func TestHierarchicalKill(t *testing.T) {
	n := len(strings.Split(hierKillKeys, ","))
	ws := spawn(t, "hier-kill", n).Procs()
	for _, w := range ws {
		if _, ok := w.WaitLine("ready "+AlgoHierarchical, 30*time.Second); !ok {
			t.Fatalf("rank %d never finished its first hierarchical allreduce", w.Rank)
		}
	}
	if err := ws[hierKillVictim].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Rank == hierKillVictim {
			continue
		}
		l, ok := w.WaitLine("failed:", 10*time.Second)
		if !ok {
			t.Fatalf("rank %d did not fail within 10 s of the kill", w.Rank)
		}
		if !strings.Contains(l.Text, fmt.Sprintf("peer rank %d (", hierKillVictim)) {
			t.Errorf("rank %d's error does not name rank %d: %s", w.Rank, hierKillVictim, l.Text)
		}
		if _, ok := w.WaitLine("errors.Is(ErrPeerLost)=true", time.Second); !ok {
			t.Errorf("rank %d's error is not ErrPeerLost", w.Rank)
		}
	}
}

// TestHierarchicalTCPOnly: the hierarchical collectives with the
// shared-memory ring off, as between hosts, in an unequal layout.
func TestHierarchicalTCPOnly(t *testing.T) {
	t.Setenv("GOTRAIN_SHM", "0")
	big := 300001
	if raceEnabled {
		big = 20001
	}
	keys := []string{"a", "b", "a", "a"}
	runGroup(t, len(keys), withNodes(keys, AlgoAuto), func(ctx context.Context, g *Group) error {
		return errors.Join(
			exerciseHier[float32](ctx, g, big, []ReduceOp{Sum, Avg, Min}),
			exerciseHier[int64](ctx, g, 7, allOps),
			exerciseHier[int64](ctx, g, 3*big, []ReduceOp{Sum, Avg}), // several chunks
			exercise[float32](ctx, g, big, false),
		)
	})
}

// TestHierarchicalNewGroup: a group made by NewGroup finds its own
// layout (ranks 1, 2, 3 of a 2x2 job: one rank on the first node, two on
// the second) and runs hierarchically; the parent's numbering of later
// groups is unchanged.
func TestHierarchicalNewGroup(t *testing.T) {
	keys := []string{"a", "a", "b", "b"}
	runGroup(t, len(keys), withNodes(keys, AlgoAuto), func(ctx context.Context, g *Group) error {
		sub, err := g.NewGroup(ctx, []int{1, 2, 3})
		if g.Rank() == 0 {
			if !errors.Is(err, ErrNotMember) {
				return fmt.Errorf("rank 0 outside the new group: %v, want ErrNotMember", err)
			}
		} else {
			if err != nil {
				return err
			}
			if want := [][]int{{0}, {1, 2}}; !slices.EqualFunc(sub.Nodes(), want, slices.Equal) {
				return fmt.Errorf("new group's Nodes() = %v, want %v", sub.Nodes(), want)
			}
			if err := errors.Join(exerciseHier[float32](ctx, sub, 1000, allOps), exercise[int32](ctx, sub, 7, false)); err != nil {
				return err
			}
			if sub.id != "/0" {
				return fmt.Errorf("the new group's id is %q, want /0", sub.id)
			}
		}
		return exerciseHier[float64](ctx, g, 1000, []ReduceOp{Sum})
	})
}
