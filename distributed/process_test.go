package distributed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// workerEnv selects a worker scenario: the test binary re-run as one rank
// of a multi-process test.
const workerEnv = "GOTRAIN_DIST_TEST_WORKER"

func TestMain(m *testing.M) {
	if s := os.Getenv(workerEnv); s != "" {
		os.Exit(runWorker(s))
	}
	goleak.VerifyTestMain(m)
}

// runWorker runs one rank of a scenario with the torchrun environment
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GOTRAIN_TOKEN) and returns
// the exit code. It prints what the parent checks.
func runWorker(scenario string) int {
	ctx := context.Background()
	g, err := Init(ctx, Config{ConnectTimeout: 20 * time.Second, Timeout: 60 * time.Second})
	if err != nil {
		fmt.Println("init error:", err)
		return 2
	}
	defer g.Destroy()
	switch scenario {
	case "collectives":
		err = errors.Join(
			exercise[float32](ctx, g, 7, true),
			exercise[int64](ctx, g, 1, true),
			exercise[float64](ctx, g, 0, false),
			exercise[int32](ctx, g, 1000003, false),
		)
	case "kill":
		// Allreduce 64 MiB until a peer dies; report how the failure
		// looked.
		buf := make([]float32, 16<<20)
		for i := 0; ; i++ {
			err = g.AllReduce(ctx, buf, Sum)
			if err != nil {
				fmt.Printf("failed: %v\n", err)
				fmt.Printf("errors.Is(ErrPeerLost)=%v\n", errors.Is(err, ErrPeerLost))
				return 3
			}
			if i == 0 {
				fmt.Println("ready")
			}
		}
	default:
		err = fmt.Errorf("unknown scenario %q", scenario)
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ok")
	return 0
}

// worker is one child process and its output, line by line with arrival
// times.
type worker struct {
	rank  int
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []line
	done  chan struct{}
	err   error
}

type line struct {
	at   time.Time
	text string
}

func (w *worker) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, l := range w.lines {
		fmt.Fprintf(&b, "  [rank %d] %s\n", w.rank, l.text)
	}
	return b.String()
}

// waitLine waits until a line with prefix appears and returns it.
func (w *worker) waitLine(prefix string, timeout time.Duration) (line, bool) {
	deadline := time.Now().Add(timeout)
	for first := true; first || time.Now().Before(deadline); first = false {
		w.mu.Lock()
		for _, l := range w.lines {
			if strings.HasPrefix(l.text, prefix) {
				w.mu.Unlock()
				return l, true
			}
		}
		w.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	return line{}, false
}

// spawn starts n ranks of scenario. Rank 0 serves the store (env://).
// On test end every child still running is killed and, if the test
// failed, every rank's output is printed.
func spawn(t *testing.T, scenario string, n int, env ...string) []*worker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	ws := make([]*worker, n)
	for r := range ws {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+scenario,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GOTRAIN_TOKEN=proc-test", "GOTRAIN_RUN_ID="+t.Name())
		cmd.Env = append(cmd.Env, env...)
		cmd.Stderr = cmd.Stdout
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = nil
		w := &worker{rank: r, cmd: cmd, done: make(chan struct{})}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				w.mu.Lock()
				w.lines = append(w.lines, line{time.Now(), sc.Text()})
				w.mu.Unlock()
			}
			w.err = cmd.Wait()
			close(w.done)
		}()
		ws[r] = w
	}
	t.Cleanup(func() {
		for _, w := range ws {
			w.cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			for _, w := range ws {
				t.Logf("rank %d exited with %v; output:\n%s", w.rank, w.err, w.output())
			}
		}
	})
	return ws
}

// waitAll waits for every worker, failing the test (and killing all of
// them) on the first failure or after timeout.
func waitAll(t *testing.T, ws []*worker, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for range ws {
		select {
		case <-deadline:
			t.Fatalf("workers still running after %v", timeout)
		case <-anyDone(ws):
		}
		for _, w := range ws {
			select {
			case <-w.done:
				if w.err != nil {
					t.Fatalf("rank %d: %v", w.rank, w.err)
				}
			default:
			}
		}
	}
	for _, w := range ws {
		select {
		case <-w.done:
		case <-deadline:
			t.Fatalf("rank %d still running after %v", w.rank, timeout)
		}
	}
}

func anyDone(ws []*worker) <-chan struct{} {
	ch := make(chan struct{})
	for _, w := range ws {
		go func() {
			<-w.done
			select {
			case ch <- struct{}{}:
			default:
			}
		}()
	}
	return ch
}

// TestProcessCollectives runs a representative subset of the matrix with
// one process per rank, rank 0 serving the store as under torchrun.
func TestProcessCollectives(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			ws := spawn(t, "collectives", n)
			waitAll(t, ws, 60*time.Second)
			for _, w := range ws {
				if _, ok := w.waitLine("ok", 0); !ok {
					t.Errorf("rank %d did not report ok", w.rank)
				}
			}
		})
	}
}

// TestProcessKill: SIGKILL one rank during a 64 MiB allreduce; every other
// rank must fail within 2 s with an error naming the dead rank. With the
// shared-memory ring and over plain TCP.
func TestProcessKill(t *testing.T) {
	if raceEnabled {
		t.Skip("64 MiB allreduces are too slow under the race detector")
	}
	for _, shm := range []string{"1", "0"} {
		t.Run("shm="+shm, func(t *testing.T) { testKill(t, "GOTRAIN_SHM="+shm) })
	}
}

func testKill(t *testing.T, env string) {
	const n, victim = 3, 1
	ws := spawn(t, "kill", n, env)
	for _, w := range ws {
		if _, ok := w.waitLine("ready", 30*time.Second); !ok {
			t.Fatalf("rank %d never finished its first allreduce", w.rank)
		}
	}
	time.Sleep(50 * time.Millisecond) // land mid-operation
	killed := time.Now()
	if err := ws[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.rank == victim {
			continue
		}
		l, ok := w.waitLine("failed:", 5*time.Second)
		if !ok {
			t.Fatalf("rank %d did not fail within 5 s of the kill", w.rank)
		}
		if d := l.at.Sub(killed); d > 2*time.Second {
			t.Errorf("rank %d failed %v after the kill, want ≤ 2 s", w.rank, d)
		}
		if !strings.Contains(l.text, fmt.Sprintf("peer rank %d (", victim)) {
			t.Errorf("rank %d's error does not name rank %d: %s", w.rank, victim, l.text)
		}
		if _, ok := w.waitLine("errors.Is(ErrPeerLost)=true", time.Second); !ok {
			t.Errorf("rank %d's error is not ErrPeerLost", w.rank)
		}
		t.Logf("rank %d, %v after the kill: %s", w.rank, l.at.Sub(killed).Round(time.Millisecond), l.text)
	}
}
