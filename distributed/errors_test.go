package distributed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/internal/testnet"
)

// initAll runs Init on every cfg concurrently and returns each result.
func initAll(t *testing.T, cfgs []Config) ([]*Group, []error) {
	t.Helper()
	gs := make([]*Group, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[i], errs[i] = Init(context.Background(), cfg)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, g := range gs {
			if g != nil {
				g.Destroy()
			}
		}
	})
	return gs, errs
}

func agentCfg(t *testing.T, addr string, rank, size int) Config {
	return Config{InitMethod: "tcp://" + addr, Rank: rank, WorldSize: size, Token: testToken,
		JobID: t.Name(), AgentStore: true, ConnectTimeout: 2 * time.Second, Timeout: 10 * time.Second}
}

func TestRankOutsideWorld(t *testing.T) {
	for _, rank := range []int{2, 3, -1} {
		_, err := Init(context.Background(), Config{InitMethod: "tcp://127.0.0.1:1", Rank: rank, WorldSize: 2})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "outside world size 2") {
			t.Errorf("rank %d of 2: got %v, want ErrConfig naming the world size", rank, err)
		}
	}
}

func TestMalformedInitMethod(t *testing.T) {
	for _, m := range []string{"bogus", "tcp://nohost", "tcp://:29500", "http://x:1", "file://", "tcp://h:99999", "tcp://h:1/path"} {
		start := time.Now()
		_, err := Init(context.Background(), Config{InitMethod: m, Rank: 0, WorldSize: 2, ConnectTimeout: time.Second})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), m) && !strings.Contains(err.Error(), "bad master address") {
			t.Errorf("%q: got %v, want ErrConfig naming it", m, err)
		}
		if time.Since(start) > 500*time.Millisecond {
			t.Errorf("%q: took %v", m, time.Since(start))
		}
	}
}

func TestEnvMissing(t *testing.T) {
	t.Setenv("RANK", "")
	t.Setenv("WORLD_SIZE", "x")
	_, err := Init(context.Background(), Config{})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("got %v, want ErrConfig", err)
	}
}

func TestUnreachableMaster(t *testing.T) {
	addr := testnet.FreeAddr(t)
	start := time.Now()
	_, err := Init(context.Background(), Config{InitMethod: "tcp://" + addr, Rank: 1, WorldSize: 2, ConnectTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("got %v, want an error naming %s", err, addr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v for a 500ms connect timeout", d)
	}
}

func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_, err = Init(context.Background(), Config{InitMethod: "tcp://127.0.0.1:" + port, Rank: 0, WorldSize: 2, ConnectTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), port) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("got %v, want an error naming port %s in use", err, port)
	}
}

func TestDataPortRange(t *testing.T) {
	p := testnet.FreePort(t)
	// The first port of the range is taken: rank 0 must use the next.
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Skip("port raced away:", err)
	}
	defer ln.Close()
	runGroup(t, 2, func(c *Config) { c.ListenHost = "127.0.0.1"; c.PortMin, c.PortMax = p, p+20 }, func(ctx context.Context, g *Group) error {
		return g.Barrier(ctx)
	})
}

func TestWrongTokenStore(t *testing.T) {
	addr := startStore(t)
	bad := agentCfg(t, addr, 1, 2)
	bad.Token = "wrong"
	_, err := Init(context.Background(), bad)
	if !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("got %v, want auth.ErrAuth", err)
	}
}

func TestWrongTokenDataPlane(t *testing.T) {
	// The file store has no token, so the data plane's handshake is what
	// refuses the intruder.
	path := "file://" + filepath.Join(t.TempDir(), "store")
	cfgs := []Config{
		{InitMethod: path, Rank: 0, WorldSize: 2, Token: "a", JobID: "j", ConnectTimeout: 2 * time.Second},
		{InitMethod: path, Rank: 1, WorldSize: 2, Token: "b", JobID: "j", ConnectTimeout: 2 * time.Second},
	}
	_, errs := initAll(t, cfgs)
	if !errors.Is(errs[1], auth.ErrAuth) {
		t.Errorf("rank 1: got %v, want auth.ErrAuth", errs[1])
	}
	// Rank 1 reports the refusal: rank 0 fails with it, not at the timeout.
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 reported") || !strings.Contains(errs[0].Error(), "GOTRAIN_TOKEN differs") {
		t.Errorf("rank 0: got %v, want rank 1's report of the token mismatch", errs[0])
	}
}

func TestDuplicateRank(t *testing.T) {
	addr := startStore(t)
	cfgs := []Config{agentCfg(t, addr, 0, 2), agentCfg(t, addr, 1, 2), agentCfg(t, addr, 1, 2)}
	// Both rank-1 processes register before rank 0 starts: with all three
	// started at once, a slow duplicate could arrive after ranks 0 and 1
	// had already formed the group, which no rendezvous can foresee. The
	// one that registers second returns at once; rank 0 then starts and,
	// like the first rank 1, reads the recorded failure.
	gs, errs := make([]*Group, len(cfgs)), make([]error, len(cfgs))
	done := make(chan int, len(cfgs))
	start := func(i int) {
		go func() {
			gs[i], errs[i] = Init(context.Background(), cfgs[i])
			done <- i
		}()
	}
	start(1)
	start(2)
	first := <-done
	start(0)
	for range len(cfgs) - 1 {
		<-done
	}
	if errs[first] == nil {
		t.Fatalf("process %d returned first without an error", first)
	}
	// The rendezvous fails everywhere, each error naming the duplicate:
	// one process found it, the others had it reported.
	found := 0
	for i, err := range errs {
		if gs[i] != nil {
			gs[i].Destroy()
		}
		switch {
		case err == nil:
			t.Errorf("process %d joined a group with a duplicate rank", i)
		case !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "duplicate rank"):
			t.Errorf("process %d: %v", i, err)
		case !strings.Contains(err.Error(), "rendezvous failed"):
			found++
		}
	}
	if found != 1 {
		t.Fatalf("%d processes found the duplicate rank themselves, want 1: %v", found, errs)
	}
}

func TestWorldSizeDisagreement(t *testing.T) {
	addr := startStore(t)
	start := time.Now()
	_, errs := initAll(t, []Config{agentCfg(t, addr, 0, 2), agentCfg(t, addr, 1, 3)})
	found := false
	for _, err := range errs {
		if err == nil {
			t.Fatal("a rank joined a group whose ranks disagree on the world size")
		}
		found = found || strings.Contains(err.Error(), "world size disagreement")
	}
	if !found {
		t.Fatalf("no rank named the world size disagreement: %v", errs)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestUnsupportedType(t *testing.T) {
	runGroup(t, 1, nil, func(ctx context.Context, g *Group) error {
		if err := g.AllReduce(ctx, []int{1}, Sum); !errors.Is(err, ErrUnsupportedType) {
			return fmt.Errorf("[]int: got %v", err)
		}
		if err := g.AllGather(ctx, make([]float32, 3), []float32{1}); err == nil {
			return fmt.Errorf("allgather with a short dst: no error")
		}
		if err := g.Broadcast(ctx, []float32{1}, 1); err == nil {
			return fmt.Errorf("broadcast root 1 in a group of 1: no error")
		}
		return nil
	})
}

// TestMismatch: ranks issuing different collectives are told so, on every
// rank, naming both operations.
func TestMismatch(t *testing.T) {
	cases := []struct {
		name string
		n    int
		run  func(ctx context.Context, g *Group) error
	}{
		{"count", 2, func(ctx context.Context, g *Group) error {
			return g.AllReduce(ctx, make([]float32, 10+10*g.Rank()), Sum)
		}},
		{"op", 2, func(ctx context.Context, g *Group) error {
			if g.Rank() == 1 {
				return g.Broadcast(ctx, make([]float32, 10), 0)
			}
			return g.AllReduce(ctx, make([]float32, 10), Sum)
		}},
		{"dtype", 3, func(ctx context.Context, g *Group) error {
			if g.Rank() == 2 {
				return g.AllReduce(ctx, make([]int32, 1000), Max)
			}
			return g.AllReduce(ctx, make([]float32, 1000), Max)
		}},
		{"root", 3, func(ctx context.Context, g *Group) error {
			return g.Broadcast(ctx, make([]float64, 5), g.Rank()/2)
		}},
		{"reduceop", 4, func(ctx context.Context, g *Group) error {
			op := Sum
			if g.Rank() == 3 {
				op = Prod
			}
			return g.AllReduce(ctx, make([]int64, 100000), op)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runGroup(t, tc.n, nil, func(ctx context.Context, g *Group) error {
				// A rank whose part of the mismatched operation completed
				// (it sent everything and expected nothing back) learns of
				// the mismatch at its next operation.
				err := tc.run(ctx, g)
				if err == nil {
					err = g.Barrier(ctx)
				}
				if !errors.Is(err, ErrMismatch) {
					return fmt.Errorf("got %v, want ErrMismatch", err)
				}
				t.Logf("rank %d: %v", g.Rank(), err)
				// The group is poisoned: later operations fail at once.
				if err := g.Barrier(ctx); !errors.Is(err, ErrMismatch) {
					return fmt.Errorf("barrier after the mismatch: %v", err)
				}
				return nil
			})
		})
	}
}

// TestStuckPeerTimeout: a live peer that never joins the collective fails
// it at the operation timeout, naming the peer.
func TestStuckPeerTimeout(t *testing.T) {
	timedOut := make(chan struct{}) // rank 0's allreduce has returned
	runGroup(t, 2, func(c *Config) { c.Timeout = 300 * time.Millisecond }, func(ctx context.Context, g *Group) error {
		if g.Rank() == 1 {
			<-timedOut
			if err := g.Barrier(ctx); err == nil {
				return errors.New("barrier after the peer timed out: no error")
			}
			return nil
		}
		defer close(timedOut)
		start := time.Now()
		err := g.AllReduce(ctx, make([]float32, 100), Sum)
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "peer rank 1") {
			return fmt.Errorf("got %v, want ErrTimeout naming peer rank 1", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			return fmt.Errorf("took %v for a 300ms timeout", d)
		}
		return nil
	})
}

func TestContextCancel(t *testing.T) {
	cancelled := make(chan struct{}) // rank 0's allreduce has returned
	runGroup(t, 2, nil, func(ctx context.Context, g *Group) error {
		if g.Rank() == 1 {
			<-cancelled // alive, but not in the allreduce, until then
		} else {
			defer close(cancelled)
			cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if err := g.AllReduce(cctx, make([]float32, 10), Sum); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrTimeout) {
				return fmt.Errorf("got %v", err)
			}
		}
		return nil
	})
}

func TestOpsAfterDestroy(t *testing.T) {
	runGroup(t, 2, nil, func(ctx context.Context, g *Group) error {
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		g.Destroy()
		if err := g.AllReduce(ctx, []float32{1}, Sum); !errors.Is(err, ErrGroupClosed) {
			return fmt.Errorf("got %v, want ErrGroupClosed", err)
		}
		return nil
	})
}

func TestAsyncInFlight(t *testing.T) {
	const ops = 1000
	runGroup(t, 3, nil, func(ctx context.Context, g *Group) error {
		bufs := make([][]int64, ops)
		works := make([]*Work, ops)
		for i := range bufs {
			bufs[i] = []int64{int64(i), int64(g.Rank())}
			switch i % 3 {
			case 0:
				works[i] = g.AllReduceAsync(ctx, bufs[i], Sum)
			case 1:
				works[i] = g.BroadcastAsync(ctx, bufs[i], 1)
			case 2:
				works[i] = g.AllReduceAsync(ctx, bufs[i], Max)
			}
		}
		for i, w := range works {
			if err := w.Wait(ctx); err != nil {
				return err
			}
			want := map[int][]int64{0: {3 * int64(i), 3}, 1: {int64(i), 1}, 2: {int64(i), 2}}[i%3]
			if bufs[i][0] != want[0] || bufs[i][1] != want[1] {
				return fmt.Errorf("op %d: got %v, want %v", i, bufs[i], want)
			}
		}
		return nil
	})
}

// TestTwoGroups: two independent jobs in one process, and a subgroup used
// interleaved with its parent.
func TestTwoGroups(t *testing.T) {
	var wg sync.WaitGroup
	for job := 0; job < 2; job++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(fmt.Sprint("job", job), func(t *testing.T) {
				runGroup(t, 3, nil, func(ctx context.Context, g *Group) error {
					sub, err := g.NewGroup(ctx, []int{2, 0})
					if g.Rank() == 1 {
						if !errors.Is(err, ErrNotMember) {
							return fmt.Errorf("non-member: got %v", err)
						}
					} else if err != nil {
						return err
					}
					for i := 0; i < 20; i++ {
						buf := []float64{float64(g.Rank() + job)}
						if err := g.AllReduce(ctx, buf, Sum); err != nil {
							return err
						}
						if buf[0] != float64(3+3*job) {
							return fmt.Errorf("job %d: parent allreduce = %v", job, buf[0])
						}
						if sub != nil {
							sb := []int32{int32(g.Rank())}
							if err := sub.AllReduce(ctx, sb, Sum); err != nil {
								return err
							}
							if sb[0] != 2 || sub.Size() != 2 || sub.Rank() != g.Rank()/2 {
								return fmt.Errorf("subgroup: sum %d size %d rank %d", sb[0], sub.Size(), sub.Rank())
							}
						}
					}
					return nil
				})
			})
		}()
	}
	wg.Wait()
}
