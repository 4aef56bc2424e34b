package localsgd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// TestMatchesReference trains the linear model on every rank and
// compares each rank's parameters after every step with the float64
// reference written from the algorithms' definitions. LocalSGD with H=1
// is DDP: with plain SGD, averaging the parameters after each step is
// averaging the gradients before it (θ − lr·mean(g) = mean(θ − lr·g)
// when the replicas start equal), so it is compared with the DDP
// reference; the others with their own.
func TestMatchesReference(t *testing.T) {
	cases := []struct {
		name, mode string
		world, h   int
		fragments  int
		delay      int
		alpha      float64
		steps      int
	}{
		{name: "localsgd_h1_is_ddp", mode: "localsgd", world: 3, h: 1, fragments: 1, steps: 8},
		{name: "localsgd_h3_fragments2", mode: "localsgd", world: 3, h: 3, fragments: 2, steps: 12},
		{name: "diloco_h3", mode: "diloco", world: 2, h: 3, fragments: 1, steps: 12},
		{name: "diloco_h3_world3", mode: "diloco", world: 3, h: 3, fragments: 1, steps: 9},
		{name: "streaming_delay1_alpha0.5", mode: "diloco", world: 2, h: 4, fragments: 2, delay: 1, alpha: 0.5, steps: 16},
		{name: "streaming_delay2_replace", mode: "diloco", world: 2, h: 4, fragments: 2, delay: 2, steps: 16},
		{name: "diloco_delay1", mode: "diloco", world: 2, h: 3, fragments: 1, delay: 1, steps: 13},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			refMode := c.mode
			if c.mode == "localsgd" && c.h == 1 {
				refMode = "ddp"
			}
			frags := [][2]int{{0, lIn*lOut + lOut}}
			if c.fragments == 2 {
				frags = [][2]int{{0, lIn * lOut}, {lIn * lOut, lIn*lOut + lOut}} // W, then b
			}
			want := newRef(refMode, c.world, c.h, frags)
			want.delay, want.alpha = c.delay, c.alpha
			got := make([][][]float32, c.world) // [rank][step]
			runRanks(t, c.world, func(ctx context.Context, g *distributed.Group) error {
				model := newLinear()
				var m *Model
				var err error
				if c.mode == "diloco" {
					m, err = NewDiLoCo(ctx, model, g, c.h, Fragments(c.fragments), Delay(c.delay), Alpha(c.alpha))
				} else {
					m, err = NewLocalSGD(ctx, model, g, c.h, Fragments(c.fragments))
				}
				if err != nil {
					return err
				}
				defer m.Close()
				if fr := m.Fragments(); len(fr) != c.fragments || fr[len(fr)-1][1] != 2 {
					return fmt.Errorf("fragments %v, want %d covering both parameters", fr, c.fragments)
				}
				opt := optim.NewSGD(m.Parameters(), 0.1)
				for s := 1; s <= c.steps; s++ {
					trainStep(m, opt, s, g.Rank())
					if err := m.AfterStep(ctx); err != nil {
						return err
					}
					got[g.Rank()] = append(got[g.Rank()], flatParams(model))
				}
				return nil
			})
			for s := 1; s <= c.steps; s++ {
				want.step(s)
				for r := range c.world {
					if msg := closeTo(got[r][s-1], want.theta[r], 1e-5); msg != "" {
						t.Fatalf("rank %d after step %d: %s", r, s, msg)
					}
				}
			}
		})
	}
}

// TestStreamingSchedule checks streaming DiLoCo's schedule over a model
// of four parameters in three fragments: every fragment starts a sync
// every H steps, at staggered steps H/F apart, is applied Delay steps
// later, and no two are in flight at once.
func TestStreamingSchedule(t *testing.T) {
	const h, frags, delay, steps = 6, 3, 2, 24
	type event struct {
		step  int64
		frag  int
		event string
	}
	var mu sync.Mutex
	events := map[int][]event{}
	var fragments [][2]int
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		model := nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
		m, err := NewDiLoCo(ctx, model, g, h, Fragments(frags), Delay(delay), BF16(true))
		if err != nil {
			return err
		}
		defer m.Close()
		inFlight := 0
		m.trace = func(step int64, f int, ev string) {
			if ev == "start" {
				inFlight++
			} else {
				inFlight--
			}
			if inFlight > 1 {
				panic(fmt.Sprintf("step %d: fragment %d starts with another in flight", step, f))
			}
			mu.Lock()
			events[g.Rank()] = append(events[g.Rank()], event{step, f, ev})
			mu.Unlock()
		}
		if g.Rank() == 0 {
			fragments = m.Fragments()
		}
		opt := optim.NewSGD(m.Parameters(), 0.05)
		x := tensor.New([]float32{0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, 2, 3)
		for range steps {
			opt.ZeroGrad()
			out := m.Forward(x)
			if err := tensor.Sum(tensor.Mul(out, out), false).Backward(); err != nil {
				return err
			}
			opt.Step()
			if err := m.AfterStep(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	// Four parameters of 12, 4, 8 and 2 values: the first fragment ends
	// at the weight that reaches a third of 26, the second at two thirds.
	if want := [][2]int{{0, 1}, {1, 3}, {3, 4}}; !slices.Equal(fragments, want) {
		t.Errorf("fragments %v, want %v", fragments, want)
	}
	var want []event
	for s := int64(1); s <= steps; s++ {
		for f := range frags {
			phase := int64((f+1)*h/frags) % h
			if s > delay && (s-delay)%h == phase {
				want = append(want, event{s, f, "apply"})
			}
		}
		for f := range frags {
			if s%h == int64((f+1)*h/frags)%h {
				want = append(want, event{s, f, "start"})
			}
		}
	}
	for r := range 2 {
		if !slices.Equal(events[r], want) {
			t.Errorf("rank %d's syncs:\n got  %v\n want %v", r, events[r], want)
		}
	}
}

// TestBF16OuterGradient syncs once with the outer gradient in float32
// and once in bfloat16, with outer SGD at learning rate 1 (θ_global −
// mean Δ): the two results differ by no more than the rounding of each
// rank's Δ to bfloat16 (8 significant bits: 2⁻⁸ relative) plus
// float32 noise, they do differ, and the bfloat16 sync sends half the
// bytes.
func TestBF16OuterGradient(t *testing.T) {
	const world, h = 2, 2
	type result struct {
		params []float32
		deltas [][]float32 // per rank
		stats  Stats
	}
	run := func(bf16 bool) result {
		var res result
		res.deltas = make([][]float32, world)
		var mu sync.Mutex
		runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
			model := newLinear()
			m, err := NewDiLoCo(ctx, model, g, h, BF16(bf16), OuterOptimizer(func(p []*tensor.Tensor) optim.Optimizer { return optim.NewSGD(p, 1) }))
			if err != nil {
				return err
			}
			defer m.Close()
			m.trace = func(_ int64, f int, ev string) {
				if ev == "start" {
					mu.Lock()
					res.deltas[g.Rank()] = append([]float32(nil), m.frags[f].send...)
					mu.Unlock()
				}
			}
			opt := optim.NewSGD(m.Parameters(), 0.3)
			for s := 1; s <= h; s++ {
				trainStep(m, opt, s, g.Rank())
				if err := m.AfterStep(ctx); err != nil {
					return err
				}
			}
			if g.Rank() == 0 {
				res.params, res.stats = flatParams(model), m.Stats()
			}
			return nil
		})
		return res
	}
	f32, b16 := run(false), run(true)
	init := linearInit()
	differ := false
	for i := range f32.params {
		var bound float64
		for r := range world {
			bound += math.Abs(float64(f32.deltas[r][i])) / world
		}
		bound = bound*math.Ldexp(1, -8) + 4*math.Ldexp(math.Abs(init[i])+bound, -24)
		d := math.Abs(float64(b16.params[i] - f32.params[i]))
		if d > bound {
			t.Errorf("θ[%d]: bf16 %v, float32 %v: |diff| %.3g > bf16 rounding bound %.3g", i, b16.params[i], f32.params[i], d, bound)
		}
		differ = differ || d != 0
	}
	if !differ {
		t.Error("the bf16 sync gave the float32 sync's exact result: its outer gradient was not rounded")
	}
	n := int64(lIn*lOut + lOut)
	if f32.stats != (Stats{Syncs: 1, SentBytes: 4 * n}) || b16.stats != (Stats{Syncs: 1, SentBytes: 2 * n}) {
		t.Errorf("stats float32 %+v, bf16 %+v; want 1 sync of %d and %d bytes", f32.stats, b16.stats, 4*n, 2*n)
	}
}

// TestContributors divides the ranks' sum by the count a membership
// layer sets: two replicas at θ with a learning rate of 0 averaged over
// 4 contributors give θ/2 (exactly: 2θ/4).
func TestContributors(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
		model := newLinear()
		m, err := NewLocalSGD(ctx, model, g, 1)
		if err != nil {
			return err
		}
		if err := m.SetContributors(0); err == nil || !strings.Contains(err.Error(), "0 contributors") {
			return fmt.Errorf("SetContributors(0) = %v, want an error naming 0 contributors", err)
		}
		if m.Contributors() != 2 {
			return fmt.Errorf("Contributors() = %d, want the group size 2", m.Contributors())
		}
		if err := m.SetContributors(4); err != nil {
			return err
		}
		trainStep(m, optim.NewSGD(m.Parameters(), 0), 1, g.Rank())
		if err := m.AfterStep(ctx); err != nil {
			return err
		}
		for i, v := range flatParams(model) {
			if want := float32(linearInit()[i]) / 2; v != want {
				return fmt.Errorf("θ[%d] = %v, want %v", i, v, want)
			}
		}
		return nil
	})
}

// TestBadConfiguration: each configuration that cannot work is an error
// wrapping ErrConfig whose message names the setting.
func TestBadConfiguration(t *testing.T) {
	cases := []struct {
		name   string
		diloco bool
		h      int
		opts   []Option
		want   string
	}{
		{"h0", true, 0, nil, "sync every 0 steps"},
		{"fragments0", true, 4, []Option{Fragments(0)}, "0 fragments"},
		{"fragments_over_h", true, 1, []Option{Fragments(2)}, "2 fragments syncing every 1 steps"},
		{"fragments_over_params", true, 8, []Option{Fragments(3)}, "model with 2 parameters"},
		{"negative_delay", true, 4, []Option{Delay(-1)}, "delay -1"},
		{"delay_over_spacing", true, 4, []Option{Fragments(2), Delay(3)}, "delay 3 steps with fragments 2 steps apart"},
		{"alpha1", true, 4, []Option{Alpha(1)}, "alpha 1"},
		{"alpha_nan", true, 4, []Option{Alpha(math.NaN())}, "alpha NaN"},
		{"localsgd_bf16", false, 4, []Option{BF16(true)}, "bf16 is DiLoCo's"},
		{"localsgd_delay", false, 4, []Option{Delay(1)}, "delay is DiLoCo's"},
		{"localsgd_outer", false, 4, []Option{OuterOptimizer(func(p []*tensor.Tensor) optim.Optimizer { return optim.NewSGD(p, 1) })}, "outer optimizer is DiLoCo's"},
	}
	g := &soloGroup{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.diloco {
				_, err = NewDiLoCo(context.Background(), newLinear(), g, c.h, c.opts...)
			} else {
				_, err = NewLocalSGD(context.Background(), newLinear(), g, c.h, c.opts...)
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line wrapping ErrConfig naming %q", err, c.want)
			}
		})
	}
}

// soloGroup is a group of one, for what needs no peer.
type soloGroup struct{}

func (soloGroup) Rank() int          { return 0 }
func (soloGroup) Size() int          { return 1 }
func (soloGroup) SharedMemory() bool { return false }
func (soloGroup) AllReduce(context.Context, any, distributed.ReduceOp) error {
	return nil
}
func (soloGroup) Broadcast(context.Context, any, int) error { return nil }
func (soloGroup) AllGather(_ context.Context, dst, src any) error {
	switch d := dst.(type) {
	case []int64:
		copy(d, src.([]int64))
	case []float32:
		copy(d, src.([]float32))
	case []int32:
		copy(d, src.([]int32))
	default:
		return fmt.Errorf("soloGroup: AllGather of %T", dst)
	}
	return nil
}

// TestPeerGoneFailsSync: when a rank leaves before a sync, the other's
// sync returns an error naming the fragment and step (blocking, and
// delayed on the group's queue) instead of hanging.
func TestPeerGoneFailsSync(t *testing.T) {
	for _, delay := range []int{0, 1} {
		t.Run(fmt.Sprintf("delay%d", delay), func(t *testing.T) {
			runRanks(t, 2, func(ctx context.Context, g *distributed.Group) error {
				model := newLinear()
				m, err := NewDiLoCo(ctx, model, g, 1, Delay(delay))
				if err != nil {
					return err
				}
				if g.Rank() == 1 {
					return g.Destroy()
				}
				opt := optim.NewSGD(m.Parameters(), 0.1)
				for s := 1; s <= 3; s++ {
					trainStep(m, opt, s, 0)
					if err = m.AfterStep(ctx); err != nil {
						break
					}
				}
				if err == nil || !strings.Contains(err.Error(), "localsgd: syncing fragment 0 at step") || strings.Contains(err.Error(), "\n") {
					return fmt.Errorf("AfterStep with the peer gone: %v, want one line naming the sync", err)
				}
				t.Logf("rank 0: %v", err)
				_ = m.Close() // the failed reduction's error again
				return nil
			})
		})
	}
}
