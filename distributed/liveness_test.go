package distributed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testproc"
)

// victimEnv names the rank a liveness scenario singles out.
const victimEnv = "GOTRAIN_TEST_VICTIM"

func init() {
	// allreduceUntilFailure allreduces until an operation fails, the
	// victim leaving (returning, so its deferred Destroy says goodbye)
	// after its first allreduce when leave is set: once every other rank
	// has said in the store that it goes on to the next one, in which it
	// then waits for the victim.
	allreduceUntilFailure := func(leave bool) func() int {
		return func() int {
			return rank(func(ctx context.Context, g *Group) error {
				victim := os.Getenv(victimEnv)
				buf := make([]float32, 1<<20)
				for i := 0; ; i++ {
					if err := g.AllReduce(ctx, buf, Sum); err != nil {
						fmt.Printf("failed: %v\n", err)
						fmt.Printf("errors.Is(ErrPeerLost)=%v\n", errors.Is(err, ErrPeerLost))
						if pf, ok := Blame(err); ok {
							fmt.Printf("blame: rank %d, silent %v\n", pf.Rank, pf.Silence > 0)
						} else {
							fmt.Println("blame: none")
						}
						return err
					}
					if i > 0 {
						continue
					}
					fmt.Println("ready")
					if !leave {
						continue
					}
					if fmt.Sprint(g.Rank()) != victim {
						if err := g.st.Set(ctx, fmt.Sprint("next/", g.Rank()), nil); err != nil {
							return err
						}
						continue
					}
					var others []string
					for r := range g.Size() {
						if fmt.Sprint(r) != victim {
							others = append(others, fmt.Sprint("next/", r))
						}
					}
					if err := g.st.Wait(ctx, others...); err != nil {
						return err
					}
					fmt.Println("leaving")
					return nil
				}
			})
		}
	}
	workers["leave"] = allreduceUntilFailure(true)
	workers["freeze"] = allreduceUntilFailure(false)
	workers["slow"] = func() int {
		// The victim computes (sleeps) longer than the heartbeat timeout
		// before each allreduce, while the others wait for it and their
		// frames reach it before it posts any receive.
		return rank(func(ctx context.Context, g *Group) error {
			buf := make([]float32, 1<<18)
			for i := range 3 {
				if fmt.Sprint(g.Rank()) == os.Getenv(victimEnv) && i > 0 {
					time.Sleep(3 * time.Second)
				}
				if err := g.AllReduce(ctx, buf, Sum); err != nil {
					return err
				}
			}
			return nil
		})
	}
	workers["sigterm"] = func() int {
		// The victim waits in an allreduce the others never join; SIGTERM
		// cancels its context.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		return rank(func(_ context.Context, g *Group) error {
			if fmt.Sprint(g.Rank()) != os.Getenv(victimEnv) {
				<-ctx.Done()
				return nil
			}
			n := 1 << 20
			if os.Getenv("GOTRAIN_TEST_BIG") == "1" {
				n = 16 << 20 // 64 MiB: sends block on the peer's full socket
			}
			errc := make(chan error, 1)
			go func() { errc <- g.AllReduce(ctx, make([]float32, n), Sum) }()
			// "waiting" once the flight recorder has it inside the
			// allreduce, for the test to send SIGTERM.
			if !testproc.Poll(30*time.Second, func() bool { return running(g, "allreduce") }) {
				return errors.New("the allreduce never started")
			}
			fmt.Println("waiting")
			err := <-errc
			fmt.Printf("failed: %v\n", err)
			return err
		})
	}
}

// running reports whether g's flight recorder shows an operation op
// that has started and not ended.
func running(g *Group, op string) bool {
	for _, r := range g.FlightRecord() {
		if r.Op == op && r.State == StateStarted {
			return true
		}
	}
	return false
}

// sharedMemoryAndTCP runs fn with the shared-memory arena and without.
func sharedMemoryAndTCP(t *testing.T, fn func(t *testing.T, env string)) {
	for _, shm := range []string{"1", "0"} {
		t.Run("shm="+shm, func(t *testing.T) { fn(t, "GOTRAIN_SHM="+shm) })
	}
}

// awaitFailures waits for every rank but victim to print its failure,
// and checks it came within bound of since and names the victim.
func awaitFailures(t *testing.T, ws []*testproc.Proc, victim int, since time.Time, bound time.Duration, name string) {
	t.Helper()
	for _, w := range ws {
		if w.Rank == victim {
			continue
		}
		l, ok := w.WaitLine("failed:", bound+30*time.Second)
		if !ok {
			t.Fatalf("rank %d did not fail within %v", w.Rank, bound+30*time.Second)
		}
		d := l.At.Sub(since)
		t.Logf("rank %d, %v after: %s", w.Rank, d.Round(time.Millisecond), l.Text)
		if d > bound {
			t.Errorf("rank %d failed %v after, want ≤ %v", w.Rank, d, bound)
		}
		if !strings.Contains(l.Text, name) {
			t.Errorf("rank %d's error does not say %q: %s", w.Rank, name, l.Text)
		}
		if _, ok := w.WaitLine("errors.Is(ErrPeerLost)=true", time.Second); !ok {
			t.Errorf("rank %d's error is not ErrPeerLost", w.Rank)
		}
	}
}

// awaitBlame checks that every rank but victim blamed its failure on
// another rank (Blame), and at least one on victim itself, as fallen
// silent if silent: the others may have heard of it from a rank that
// did.
func awaitBlame(t *testing.T, ws []*testproc.Proc, victim int, silent bool) {
	t.Helper()
	direct := 0
	for _, w := range ws {
		if w.Rank == victim {
			continue
		}
		l, ok := w.WaitLine("blame: ", 5*time.Second)
		switch {
		case !ok || l.Text == "blame: none":
			t.Errorf("rank %d blamed no peer for its failure: %q", w.Rank, l.Text)
		case l.Text == fmt.Sprintf("blame: rank %d, silent %v", victim, silent):
			direct++
		case strings.HasPrefix(l.Text, fmt.Sprintf("blame: rank %d,", w.Rank)):
			t.Errorf("rank %d blamed itself: %q", w.Rank, l.Text)
		}
	}
	if direct == 0 {
		t.Errorf("no rank blamed rank %d (silent %v)", victim, silent)
	}
}

// TestProcessPeerLeaves: a rank returns from its loop (its deferred
// Destroy says goodbye) while the others wait for it in the next
// allreduce; they fail at once, saying it left.
func TestProcessPeerLeaves(t *testing.T) {
	sharedMemoryAndTCP(t, func(t *testing.T, env string) {
		const n, victim = 3, 1
		ws := spawn(t, "leave", n, env, fmt.Sprintf("%s=%d", victimEnv, victim)).Procs()
		l, ok := ws[victim].WaitLine("leaving", 30*time.Second)
		if !ok {
			t.Fatalf("rank %d never left", victim)
		}
		awaitFailures(t, ws, victim, l.At, 2*time.Second, fmt.Sprintf("rank %d left the group", victim))
		awaitBlame(t, ws, victim, false)
		<-ws[victim].Done()
		if err := ws[victim].Err(); err != nil {
			t.Errorf("the rank that left: %v", err)
		}
	})
}

// TestProcessPeerFrozen: SIGSTOP a rank during the allreduces; every other
// rank fails within the heartbeat timeout (2 s here) plus a margin,
// naming it, long before the operation timeout.
func TestProcessPeerFrozen(t *testing.T) {
	if raceEnabled {
		t.Skip("allreduces are too slow under the race detector to stop one mid-run")
	}
	sharedMemoryAndTCP(t, func(t *testing.T, env string) {
		const n, victim = 3, 2
		ws := spawn(t, "freeze", n, env, "GOTRAIN_HEARTBEAT_TIMEOUT=2s").Procs()
		for _, w := range ws {
			if _, ok := w.WaitLine("ready", 30*time.Second); !ok {
				t.Fatalf("rank %d never finished its first allreduce", w.Rank)
			}
		}
		stopped := time.Now()
		if err := ws[victim].Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer ws[victim].Signal(syscall.SIGKILL)
		awaitFailures(t, ws, victim, stopped, 6*time.Second, fmt.Sprintf("peer rank %d (", victim))
		awaitBlame(t, ws, victim, true)
	})
}

// TestProcessSlowPeerIsAlive: a rank that computes for longer than the
// heartbeat timeout between collectives is not reported: its heartbeats
// keep coming while it computes.
func TestProcessSlowPeerIsAlive(t *testing.T) {
	sharedMemoryAndTCP(t, func(t *testing.T, env string) {
		ranks := spawn(t, "slow", 3, env, victimEnv+"=1", "GOTRAIN_HEARTBEAT_TIMEOUT=2s")
		ranks.WaitOK()
	})
}

// TestProcessSIGTERMStopsWait: a rank waiting in an allreduce its peers
// never join returns within a second of SIGTERM: waiting for data, in
// shared memory, and blocked sending 64 MiB that the peer does not read.
func TestProcessSIGTERMStopsWait(t *testing.T) {
	sharedMemoryAndTCP(t, func(t *testing.T, env string) { testSIGTERM(t, env) })
	t.Run("blocked-send", func(t *testing.T) { testSIGTERM(t, "GOTRAIN_SHM=0", "GOTRAIN_TEST_BIG=1") })
}

func testSIGTERM(t *testing.T, env ...string) {
	const n, victim = 2, 0
	ws := spawn(t, "sigterm", n, append(env, fmt.Sprintf("%s=%d", victimEnv, victim))...).Procs()
	if _, ok := ws[victim].WaitLine("waiting", 30*time.Second); !ok {
		t.Fatalf("rank %d never reached its allreduce", victim)
	}
	sent := time.Now()
	if err := ws[victim].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	l, ok := ws[victim].WaitLine("failed:", 70*time.Second)
	if !ok {
		t.Fatalf("rank %d did not return after SIGTERM", victim)
	}
	d := l.At.Sub(sent)
	t.Logf("returned %v after SIGTERM: %s", d.Round(time.Millisecond), l.Text)
	if d > time.Second {
		t.Errorf("returned %v after SIGTERM, want ≤ 1 s", d)
	}
	if !strings.Contains(l.Text, "context canceled") {
		t.Errorf("error does not say the context was cancelled: %s", l.Text)
	}
	for _, w := range ws {
		w.Signal(syscall.SIGTERM)
	}
}

// TestTimeoutsFromEnvironment: GOTRAIN_TIMEOUT and
// GOTRAIN_HEARTBEAT_TIMEOUT set the zero fields; explicit fields win; a
// malformed value is a configuration error naming the variable.
func TestTimeoutsFromEnvironment(t *testing.T) {
	t.Setenv("GOTRAIN_TIMEOUT", "42s")
	t.Setenv("GOTRAIN_HEARTBEAT_TIMEOUT", "3s")
	c := Config{}
	if err := c.resolveTimeouts(); err != nil {
		t.Fatal(err)
	}
	if c.Timeout != 42*time.Second || c.HeartbeatTimeout != 3*time.Second {
		t.Errorf("from the environment: Timeout %v, HeartbeatTimeout %v; want 42s, 3s", c.Timeout, c.HeartbeatTimeout)
	}
	c = Config{Timeout: time.Minute, HeartbeatTimeout: time.Second}
	if err := c.resolveTimeouts(); err != nil {
		t.Fatal(err)
	}
	if c.Timeout != time.Minute || c.HeartbeatTimeout != time.Second {
		t.Errorf("explicit fields: Timeout %v, HeartbeatTimeout %v; want 1m, 1s", c.Timeout, c.HeartbeatTimeout)
	}
	t.Setenv("GOTRAIN_TIMEOUT", "")
	t.Setenv("GOTRAIN_HEARTBEAT_TIMEOUT", "")
	c = Config{}
	if err := c.resolveTimeouts(); err != nil {
		t.Fatal(err)
	}
	if c.Timeout != DefaultTimeout || c.HeartbeatTimeout != DefaultHeartbeatTimeout {
		t.Errorf("defaults: Timeout %v, HeartbeatTimeout %v", c.Timeout, c.HeartbeatTimeout)
	}
	for _, env := range []string{"GOTRAIN_TIMEOUT", "GOTRAIN_HEARTBEAT_TIMEOUT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "soon")
			c := Config{}
			if err := c.resolveTimeouts(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), env) {
				t.Errorf("%s=soon: got %v, want ErrConfig naming it", env, err)
			}
		})
	}
}

// TestLongWaitLogged: while an allreduce waits for a late peer longer
// than waitLogAfter, the waiting rank logs that it waits for that peer
// and that the peer is alive, again once per waitLogAfter; the late
// rank, which waits for nobody, logs nothing.
func TestLongWaitLogged(t *testing.T) {
	old := waitLogAfter
	waitLogAfter = 300 * time.Millisecond
	defer func() { waitLogAfter = old }()
	const reports = 3 // rank 1 joins once rank 0 has logged the wait this often
	for _, algo := range []string{AlgoShm, AlgoRing} {
		t.Run(algo, func(t *testing.T) {
			logs := []*testlog.Buffer{{}, {}}
			var start time.Time // before rank 0's allreduce
			runGroup(t, 2, func(c *Config) {
				c.AllReduceAlgo = algo
				c.Logger = slog.New(slog.NewTextHandler(logs[c.Rank], nil))
			}, func(ctx context.Context, g *Group) error {
				if g.Rank() == 0 {
					start = time.Now()
				} else if !testproc.Poll(30*time.Second, func() bool { return strings.Count(logs[0].String(), "still waiting") >= reports }) {
					return fmt.Errorf("rank 0 did not log the wait %d times in 30 s:\n%s", reports, logs[0].String())
				}
				return g.AllReduce(ctx, make([]float32, 1<<16), Sum)
			})
			waited := time.Since(start)
			got := logs[0].String()
			t.Logf("rank 0 logged:\n%s", got)
			if !strings.Contains(got, "still waiting for peers") || !strings.Contains(got, "waiting_for=[1]") ||
				!strings.Contains(got, "rank 1 heard") {
				t.Errorf("rank 0 did not log that it waits for the live rank 1:\n%s", got)
			}
			// The k-th report comes k·waitLogAfter or more after the
			// allreduce started, however late the ticks.
			if n := strings.Count(got, "still waiting"); time.Duration(n)*waitLogAfter > waited {
				t.Errorf("rank 0 logged the wait %d times in %v, want at most once per %v", n, waited, waitLogAfter)
			}
			if l := logs[1].String(); strings.Contains(l, "still waiting") {
				t.Errorf("rank 1, which waited for nobody, logged a wait:\n%s", l)
			}
		})
	}
}
