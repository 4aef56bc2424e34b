// Package testproc runs multi-process tests: the test binary re-runs
// itself as worker processes, one per rank, which TestMain sends to a
// named worker function instead of the tests (selected by the
// GOTRAIN_TEST_WORKER environment variable).
//
// A package adopts it in three steps: name its workers, dispatch in
// TestMain, start ranks in a test.
//
//	var workers = testproc.Workers{
//		"allreduce": func() int { // one rank; RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT are set
//			return testproc.ExitCode(runAllReduce(context.Background()))
//		},
//	}
//
//	func TestMain(m *testing.M) {
//		testproc.Dispatch(workers) // a worker process runs its worker and exits here
//		goleak.VerifyTestMain(m)   // or os.Exit(m.Run())
//	}
//
//	func TestAllReduceProcesses(t *testing.T) {
//		ranks := testproc.Start(t, "allreduce", 3, testproc.Options{Env: []string{"GOTRAIN_TOKEN=t"}})
//		ranks.WaitOK() // fails at the first rank that exits non-zero, killing the others
//	}
//
// Start gives the ranks the torchrun contract on loopback (MASTER_PORT is
// a free port, for rank 0 to serve the store on as under torchrun, unless
// the test serves one itself and overrides it), captures each rank's
// stdout and stderr line by line with arrival times, kills every rank
// still running at the timeout and when the test ends, and logs every
// rank's exit status and output if the test failed. A program that starts
// the test binary itself (a launcher under test) uses Command or Env.
package testproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testnet"
)

// WorkerEnv names the worker a re-run test binary is to run.
const WorkerEnv = "GOTRAIN_TEST_WORKER"

// DefaultTimeout bounds a Start whose Options.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// Workers maps worker names to the functions that run them; a function's
// result is the process's exit status.
type Workers map[string]func() int

// Dispatch runs the worker that WorkerEnv names, if it is set, and exits
// with its status; otherwise it returns at once. Call it first in TestMain.
// An unknown name exits with status 2.
func Dispatch(ws Workers) {
	name := os.Getenv(WorkerEnv)
	if name == "" {
		return
	}
	fn, ok := ws[name]
	if !ok {
		names := make([]string, 0, len(ws))
		for n := range ws {
			names = append(names, n)
		}
		slices.Sort(names)
		fmt.Fprintf(os.Stderr, "testproc: %s=%q names no worker of this test binary (it has %v)\n", WorkerEnv, name, names)
		os.Exit(2)
	}
	os.Exit(fn())
}

// ExitCode turns a worker's error into its exit status: 0 for nil, else
// the error on stderr and 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "worker error:", err)
	return 1
}

// Env is the variable that makes the test binary run worker: for a
// program under test that starts the test binary itself.
func Env(worker string) string { return WorkerEnv + "=" + worker }

// Environ is os.Environ() with WorkerEnv set to worker.
func Environ(worker string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, WorkerEnv+"=") })
	return append(env, Env(worker))
}

// Command returns the test binary set up to run worker with args (which a
// worker that parses flags, like a main function, sees in os.Args) and the
// environment Environ(worker). The caller starts and waits for it.
func Command(ctx context.Context, t testing.TB, worker string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, executable(t), args...)
	cmd.Env = Environ(worker)
	return cmd
}

func executable(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// Options configures Start.
type Options struct {
	// Env is added to every rank's environment, after the defaults (so it
	// may override MASTER_ADDR and MASTER_PORT, for a store the test
	// serves itself).
	Env []string
	// RankEnv, if not nil, returns more variables for one rank, added
	// last.
	RankEnv func(rank int) []string
	// Exe, if not nil, returns the program a rank runs instead of the
	// test binary ("" keeps the test binary): a modified copy of it, to
	// test ranks that run different builds.
	Exe func(rank int) string
	// Timeout bounds the ranks' whole run: at the deadline every rank
	// still running is killed and the test fails. 0 means DefaultTimeout.
	Timeout time.Duration
}

// Ranks is a set of running worker processes.
type Ranks struct {
	t        testing.TB
	procs    []*Proc
	exited   chan *Proc // each proc once, when it has exited
	nexited  int
	timeout  time.Duration
	stop     chan struct{} // closed when the watchdog is no longer needed
	timedOut chan struct{} // closed when the watchdog killed the ranks
}

// Proc is one worker process and its output.
type Proc struct {
	// Rank is the process's RANK.
	Rank int
	// Cmd is the process; Cmd.Process is set.
	Cmd *exec.Cmd

	out  lineWriter
	done chan struct{}
	err  error
}

// Line is one line of a process's output and when it arrived.
type Line struct {
	At   time.Time
	Text string
}

// Start runs n ranks of worker: the test binary with WorkerEnv=worker and
// RANK, LOCAL_RANK (both the rank), WORLD_SIZE, LOCAL_WORLD_SIZE (both n),
// MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port), then o.Env and
// o.RankEnv. When the test ends, every rank still running is killed and,
// if the test failed, every rank's exit status and output are logged.
func Start(t testing.TB, worker string, n int, o Options) *Ranks {
	t.Helper()
	exe := executable(t)
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	rs := &Ranks{t: t, procs: make([]*Proc, 0, n), exited: make(chan *Proc, n), timeout: o.Timeout,
		stop: make(chan struct{}), timedOut: make(chan struct{})}
	t.Cleanup(rs.cleanup)
	base := append(Environ(worker),
		"WORLD_SIZE="+strconv.Itoa(n), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(testnet.FreePort(t)))
	base = append(base, o.Env...)
	for r := range n {
		// -test.run=^$: should the binary not dispatch, it runs no test
		// rather than start more workers.
		path := exe
		if o.Exe != nil && o.Exe(r) != "" {
			path = o.Exe(r)
		}
		cmd := exec.Command(path, "-test.run=^$")
		cmd.Env = append(slices.Clip(base), "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r))
		if o.RankEnv != nil {
			cmd.Env = append(cmd.Env, o.RankEnv(r)...)
		}
		p := &Proc{Rank: r, Cmd: cmd, done: make(chan struct{})}
		// One writer for both: exec gives the child a single pipe, so
		// stdout and stderr lines keep their order.
		cmd.Stdout, cmd.Stderr = &p.out, &p.out
		// A grandchild holding the pipe must not hold up Wait.
		cmd.WaitDelay = 2 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatalf("testproc: start rank %d of %s: %v", r, worker, err)
		}
		rs.procs = append(rs.procs, p)
		go func() {
			p.err = cmd.Wait()
			p.out.flush()
			close(p.done)
			rs.exited <- p
		}()
	}
	go rs.watchdog()
	return rs
}

// Watch starts cmd, a program the test built itself (such as one run
// in another namespace), as a Proc of the given rank: its output captured
// line by line, killed when the test ends, its output logged if the test
// failed.
func Watch(t testing.TB, cmd *exec.Cmd, rank int) *Proc {
	t.Helper()
	p := &Proc{Rank: rank, Cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("testproc: start %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		p.out.flush()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("rank %d (%s) exited with %v; output:\n%s", rank, cmd.Path, p.err, p.Output())
		}
	})
	return p
}

// watchdog kills every rank at the timeout.
func (rs *Ranks) watchdog() {
	timer := time.NewTimer(rs.timeout)
	defer timer.Stop()
	select {
	case <-rs.stop:
	case <-timer.C:
		close(rs.timedOut)
		rs.Kill()
	}
}

func (rs *Ranks) cleanup() {
	rs.Kill()
	for _, p := range rs.procs {
		<-p.done
	}
	select {
	case <-rs.timedOut:
		if !rs.t.Failed() { // no Wait has said so
			rs.t.Errorf("testproc: ranks still running after %v: killed", rs.timeout)
		}
	default:
		close(rs.stop)
	}
	if rs.t.Failed() {
		for _, p := range rs.procs {
			rs.t.Logf("rank %d exited with %v; output:\n%s", p.Rank, p.err, p.Output())
		}
	}
}

// Procs returns the ranks' processes, indexed by rank.
func (rs *Ranks) Procs() []*Proc { return rs.procs }

// Kill sends SIGKILL to every rank still running.
func (rs *Ranks) Kill() {
	for _, p := range rs.procs {
		select {
		case <-p.done:
		default:
			p.Cmd.Process.Kill()
		}
	}
}

// Wait waits until every rank has exited, whatever its status, and fails
// the test if the timeout killed them.
func (rs *Ranks) Wait() {
	rs.t.Helper()
	for _, p := range rs.procs {
		<-p.done
	}
	rs.checkTimeout()
}

// WaitOK waits until every rank has exited with status 0. At the first
// that exits otherwise it kills the others and fails the test. Like
// Wait, call it from the test's goroutine.
func (rs *Ranks) WaitOK() {
	rs.t.Helper()
	for ; rs.nexited < len(rs.procs); rs.nexited++ {
		p := <-rs.exited
		if p.err != nil {
			rs.Kill()
			rs.checkTimeout()
			rs.t.Fatalf("rank %d: %v", p.Rank, p.err)
		}
	}
	rs.checkTimeout()
}

func (rs *Ranks) checkTimeout() {
	rs.t.Helper()
	select {
	case <-rs.timedOut:
		rs.t.Fatalf("ranks still running after %v: killed", rs.timeout)
	default:
	}
}

// Done is closed when the process has exited and its output is complete.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err waits for the process to exit and returns its exit error (nil for
// status 0).
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Output returns the lines written so far, each prefixed with the rank.
func (p *Proc) Output() string {
	var b strings.Builder
	for _, l := range p.Lines() {
		fmt.Fprintf(&b, "  [rank %d] %s\n", p.Rank, l.Text)
	}
	return b.String()
}

// Text returns the output written so far, each line ending in a newline
// (a last line without one gets one once the process has exited).
func (p *Proc) Text() string {
	var b strings.Builder
	for _, l := range p.Lines() {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// Lines returns the lines written so far.
func (p *Proc) Lines() []Line { return p.out.lines() }

// WaitLine waits up to timeout for a line that starts with prefix and
// returns the first such line. A zero timeout looks once.
func (p *Proc) WaitLine(prefix string, timeout time.Duration) (Line, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	last := timeout == 0
	for {
		lines, grew := p.out.watch()
		for _, l := range lines {
			if strings.HasPrefix(l.Text, prefix) {
				return l, true
			}
		}
		if last {
			return Line{}, false
		}
		select {
		case <-grew:
		case <-p.done: // the output is complete: one last look
			last = true
		case <-timer.C:
			last = true
		}
	}
}

// Poll calls cond until it returns true, and reports whether it did
// within limit: for a state the test cannot be told of, such as a file
// appearing or a port listening. It looks again after 1 ms, then less
// often, up to every 50 ms; limit only bounds how long a failing test
// waits.
func Poll(limit time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 50*time.Millisecond) {
		again := time.NewTimer(wait)
		select {
		case <-again.C:
		case <-deadline.C:
			again.Stop()
			return cond()
		}
	}
	return true
}

// lineWriter splits what a process writes into lines stamped with their
// arrival time; a last line without a newline is kept at exit.
type lineWriter struct {
	mu      sync.Mutex
	partial []byte
	done    []Line
	grew    chan struct{} // closed when a line is added, then replaced
}

func (w *lineWriter) Write(b []byte) (int, error) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for {
		i := slices.Index(b, '\n')
		if i < 0 {
			w.partial = append(w.partial, b...)
			return n, nil
		}
		w.add(Line{now, string(append(w.partial, b[:i]...))})
		w.partial, b = w.partial[:0], b[i+1:]
	}
}

// add appends l and wakes the watchers; w.mu is held.
func (w *lineWriter) add(l Line) {
	w.done = append(w.done, l)
	if w.grew != nil {
		close(w.grew)
		w.grew = nil
	}
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.add(Line{time.Now(), string(w.partial)})
		w.partial = nil
	}
}

func (w *lineWriter) lines() []Line {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.done)
}

// watch returns the lines so far and a channel closed when more arrive.
func (w *lineWriter) watch() ([]Line, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.grew == nil {
		w.grew = make(chan struct{})
	}
	return slices.Clone(w.done), w.grew
}
