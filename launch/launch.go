package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/launch/internal/freeport"
	"github.com/gotrain/gotrain/launch/tempdir"
)

const (
	// killWait bounds the wait for workers to be reaped after SIGKILL; only
	// a process stuck in the kernel outlives it.
	killWait = 5 * time.Second
	// drainWait bounds the wait for a stopped worker's last output.
	drainWait = time.Second
)

// stopTimer starts the StopTimeout of a stop: the channel receives when
// it has passed. Tests replace it to decide when that is.
var stopTimer = func(d time.Duration) (c <-chan time.Time, stop func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// beforeStart is called before each worker of an attempt starts. Tests
// replace it to act between two starts.
var beforeStart = func(localRank int) {}

// SignalError is a context cancellation cause that names the signal the
// launcher received. When Run's ctx is cancelled with a SignalError cause
// (context.WithCancelCause), Run forwards that signal to the workers instead
// of SIGTERM and reports 128+signal, as a shell would.
type SignalError struct {
	Signal syscall.Signal
}

func (e *SignalError) Error() string { return SignalName(e.Signal) + " received" }

// Is makes a SignalError match context.Canceled, as the causes of
// signal.NotifyContext do: the context was cancelled, for this reason.
func (e *SignalError) Is(target error) bool { return target == context.Canceled }

// Run runs one node's share of a job: cfg.NProcPerNode copies of
// cfg.Program, each in its own process group with the torchrun environment
// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
// ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
// TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID) plus GOTRAIN_RESTART_COUNT,
// GOTRAIN_RUN_ID, GOTRAIN_TOKEN (inherited, or a fresh random one for a
// single-node job) and the thread counts GOTRAIN_NUM_THREADS and
// OMP_NUM_THREADS (max(1, CPUs / NProcPerNode) unless inherited). Each line
// a worker writes to stdout or stderr goes to cfg.Stdout or cfg.Stderr
// prefixed with "[rank<N>]: ".
//
// Run returns when the job ends:
//   - every worker exited 0: (0, nil);
//   - a worker failed and no restart remains: the root cause's exit code
//     (see RootCause; 128+signal if a signal killed it) and a nil error, after
//     stopping the other workers (SIGTERM to their process groups, SIGKILL
//     after cfg.StopTimeout). With restarts left, all workers are stopped
//     and started again with the restart count one higher;
//   - ctx ended: the workers get SIGTERM (or the signal of a SignalError
//     cause), SIGKILL after cfg.StopTimeout, and Run returns 128+signal and
//     an error wrapping ErrInterrupted and the cause;
//   - the job could not start (bad Config, program not found, no token for
//     a multi-node job, a log directory that cannot be created): 1 and an
//     error wrapping ErrConfig, ErrProgramNotFound or the I/O error.
//
// Run leaves no worker process, no worker's child in its process group and
// no goroutine behind, unless a process survives SIGKILL for killWait. If
// the launcher itself is killed (even by SIGKILL), a reaper process it
// started (a copy of its executable) stops the workers' process groups:
// SIGTERM, then SIGKILL after cfg.StopTimeout. While Run runs, SIGPIPE is
// handled, so a closed stdout drops the workers' lines instead of killing
// the launcher.
func Run(ctx context.Context, cfg Config) (exitCode int, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return 1, err
	}
	path, err := exec.LookPath(cfg.Program)
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err
		}
		return 1, fmt.Errorf("%w: %s: %w", ErrProgramNotFound, cfg.Program, err)
	}
	inherited := cfg.Env
	if inherited == nil {
		inherited = os.Environ()
	}
	if cfg.Standalone {
		if cfg.RunID == "" {
			cfg.RunID = randomRunID()
		}
		if cfg.MasterPort == 0 {
			if cfg.MasterPort, err = freeport.Pick(cfg.MasterAddr); err != nil {
				return 1, fmt.Errorf("launch: %w", err)
			}
		}
	}
	if cfg.Rendezvous != nil {
		// The largest group decides whether the job is multi-node (and so
		// needs a shared token); each round sets the node's place.
		cfg.NNodes, cfg.NodeRank = cfg.Rendezvous.MaxNodes(), 0
	}
	// Node 0 serves an FT job's store; the other nodes' workers reach it.
	serveStore := cfg.FT && !cfg.AgentStore && cfg.NodeRank == 0
	cfg.AgentStore = cfg.AgentStore || cfg.FT
	je, err := newJobEnv(cfg, inherited)
	if err != nil {
		return 1, err
	}
	if serveStore {
		srv, err := serveFTStore(cfg, je.token, inherited)
		if err != nil {
			return 1, err
		}
		defer srv.Close()
	}

	var mu sync.Mutex
	j := &job{
		events: serialEvents(cfg.Events),
		cfg:    cfg,
		env:    je,
		path:   path,
		stdout: lockedWriter{&mu, orStd(cfg.Stdout, os.Stdout)},
		stderr: lockedWriter{&mu, orStd(cfg.Stderr, os.Stderr)},
		log:    cfg.Logger,
		round:  -1,
	}
	if j.log == nil {
		j.log = slog.New(slog.NewTextHandler(j.stderr, nil))
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return 1, fmt.Errorf("launch: log directory: %w", err)
		}
		// A unique directory per job, as torchrun's, since run ids repeat ("none").
		safeID := strings.Map(func(r rune) rune {
			if r == '/' || r == os.PathSeparator {
				return '_'
			}
			return r
		}, cfg.RunID)
		if j.logRoot, err = os.MkdirTemp(cfg.LogDir, safeID+"_"); err != nil {
			return 1, fmt.Errorf("launch: log directory: %w", err)
		}
		j.log.Info("launch: writing worker logs", "dir", j.logRoot)
	}
	defer cleanShm(j.log, cfg.RunID)()
	// The private directories of gotrain processes killed before they
	// could remove them (tempdir) go at the next start.
	tempdir.Sweep(os.TempDir())
	// A closed stdout (`gotrain run ... | head -1`) must not kill the
	// launcher, and with it the job: with SIGPIPE handled, writes to it
	// fail with EPIPE and the workers' lines to it are dropped. (Handled,
	// not ignored: an ignored signal would be inherited by the workers.)
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	if j.reaper, err = startReaper(cfg.StopTimeout); err != nil {
		j.log.Warn("launch: workers' children will outlive a killed launcher", "err", err)
	}
	defer j.reaper.close()
	return j.run(ctx)
}

// job is one Run call. Only Run's goroutine uses it.
type job struct {
	cfg     Config
	env     *jobEnv
	path    string
	stdout  lockedWriter
	stderr  lockedWriter
	log     *slog.Logger
	logRoot string                      // "" without LogDir
	events  func(rank int, line []byte) // serialized cfg.Events, or nil
	reaper  *reaper                     // stops the workers' groups if the launcher dies; may be nil
	round   int                         // the rendezvous round of an elastic job, or -1
}

// outcome is how one attempt (a start of all workers) ended.
type outcome struct {
	failed      *worker        // the root cause's worker (see watch), or nil
	root        *Failure       // the root cause when a worker failed
	interrupted syscall.Signal // the signal forwarded on ctx's end, or 0
}

func (j *job) run(ctx context.Context) (int, error) {
	if j.cfg.Rendezvous != nil {
		return j.runElastic(ctx)
	}
	if j.cfg.FT {
		return j.runFT(ctx)
	}
	c := j.cfg
	for restart := c.RestartCount; ; restart++ {
		if ctx.Err() != nil {
			return j.interrupted(ctx, StopSignal(ctx))
		}
		j.log.Info("launch: starting workers",
			"program", c.Program, "nproc_per_node", c.NProcPerNode, "node_rank", c.NodeRank,
			"nnodes", c.NNodes, "world_size", c.worldSize(),
			"master_addr", c.MasterAddr, "master_port", c.MasterPort,
			"run_id", c.RunID, "restart_count", restart)
		out, err := j.attempt(ctx, restart)
		switch {
		case err != nil:
			return 1, err
		case out.interrupted != 0:
			return j.interrupted(ctx, out.interrupted)
		case out.failed == nil:
			j.log.Info("launch: all workers finished", "restart_count", restart)
			return 0, nil
		case restart < c.MaxRestarts && !c.NoRestart:
			delay := RestartDelay(c.RestartBackoff, c.MaxRestartBackoff, restart+1)
			j.log.Warn(fmt.Sprintf("launch: restarting workers in %v (restart %d of %d)", delay, restart+1, c.MaxRestarts),
				"failed_rank", out.failed.rank, "exit_code", out.failed.code, "cause", describeExit(out.failed.code),
				"restart_count", restart+1, "max_restarts", c.MaxRestarts, "delay", delay)
			if !sleepCtx(ctx, delay) {
				return j.interrupted(ctx, StopSignal(ctx))
			}
		default:
			j.reportFailure(out.report(restart, c.MaxRestarts))
			return out.failed.code, nil
		}
	}
}

func (j *job) interrupted(ctx context.Context, sig syscall.Signal) (int, error) {
	return 128 + int(sig), fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
}

// exitEvent reports that workers[idx] exited with code.
type exitEvent struct {
	idx  int
	code int
}

// attempt starts all workers and watches them until they all succeed, one
// fails, or ctx ends; either way no worker is left running when it returns.
func (j *job) attempt(ctx context.Context, restart int) (outcome, error) {
	n := j.cfg.NProcPerNode
	var workers []*worker
	// Buffered for every worker, so wait goroutines never block and never leak.
	exits := make(chan exitEvent, n)
	logDir := ""
	if j.logRoot != "" {
		logDir = filepath.Join(j.logRoot, "attempt_"+strconv.Itoa(restart))
		if j.round >= 0 { // restarts repeat across an elastic job's rounds
			logDir = filepath.Join(j.logRoot, "round_"+strconv.Itoa(j.round))
		}
	}
	for local := range n {
		beforeStart(local)
		if ctx.Err() != nil {
			// A signal while starting many workers stops the start at once.
			sig := StopSignal(ctx)
			j.log.Warn("launch: interrupted while starting workers, stopping them",
				"signal", sig.String(), "started", len(workers), "nproc_per_node", n, "cause", context.Cause(ctx))
			j.stop(workers, exits, sig)
			finishOutput(workers)
			return outcome{interrupted: sig}, nil
		}
		w, err := startWorker(workerSpec{
			path:      j.path,
			argv0:     j.cfg.Program,
			args:      j.cfg.Args,
			env:       j.env.environ(local, restart),
			localRank: local,
			rank:      j.cfg.globalRank(local),
			stdout:    j.stdout,
			stderr:    j.stderr,
			events:    j.events,
			logDir:    logDir,
			route:     j.cfg.route(local),
			reaper:    j.reaper,
		})
		if err != nil {
			j.stop(workers, exits, syscall.SIGKILL)
			finishOutput(workers)
			return outcome{}, err
		}
		workers = append(workers, w)
		go func() {
			_ = w.cmd.Wait() // the exit status is in ProcessState; pipes are ours, so no copy errors
			exits <- exitEvent{idx: local, code: exitCode(w.cmd.ProcessState)}
		}()
	}

	return j.watch(ctx, workers, exits, restart), nil
}

// finishOutput lets the workers' last output drain, all within one
// drainWait.
func finishOutput(workers []*worker) {
	deadline := time.Now().Add(drainWait)
	for _, w := range workers {
		w.finishOutput(deadline)
	}
}

// stop sends sig to every worker's process group that still has processes,
// waits until the groups are empty (polling every MonitorInterval) or
// StopTimeout passes, then SIGKILLs what is left and waits for the workers
// to be reaped.
func (j *job) stop(workers []*worker, exits <-chan exitEvent, sig syscall.Signal) {
	signalled := false
	for _, w := range workers {
		if w.groupAlive() {
			if w.exited {
				j.log.Warn("launch: worker exited but left processes in its group; stopping them", "rank", w.rank, "pgid", w.pid())
			}
			w.signalGroup(sig)
			signalled = true
		}
	}
	if !signalled && allExited(workers) {
		return
	}
	deadline, stopDeadline := stopTimer(j.cfg.StopTimeout)
	defer stopDeadline()
	tick := time.NewTicker(j.cfg.MonitorInterval)
	defer tick.Stop()
	record := func(ev exitEvent) {
		workers[ev.idx].exited, workers[ev.idx].code = true, ev.code
	}
	for !allExited(workers) || anyGroupAlive(workers) {
		select {
		case ev := <-exits:
			record(ev)
		case <-tick.C:
		case <-deadline:
			var killed []int
			for _, w := range workers {
				if w.groupAlive() {
					w.signalGroup(syscall.SIGKILL)
					killed = append(killed, w.rank)
				}
			}
			j.log.Warn("launch: workers did not stop in time, killed them",
				"ranks", killed, "stop_timeout", j.cfg.StopTimeout)
			giveUp := time.After(killWait)
			for !allExited(workers) {
				select {
				case ev := <-exits:
					record(ev)
				case <-giveUp:
					j.log.Error("launch: workers survive SIGKILL", "wait", killWait)
					return
				}
			}
			return
		}
	}
}

func allExited(workers []*worker) bool {
	for _, w := range workers {
		if !w.exited {
			return false
		}
	}
	return true
}

func anyGroupAlive(workers []*worker) bool {
	for _, w := range workers {
		if w.groupAlive() {
			return true
		}
	}
	return false
}

// StopSignal is the signal to forward when ctx has ended: the one in a
// SignalError cause, else SIGTERM.
func StopSignal(ctx context.Context) syscall.Signal {
	var se *SignalError
	if errors.As(context.Cause(ctx), &se) && se.Signal != 0 {
		return se.Signal
	}
	return syscall.SIGTERM
}

// describeExit says in words what an exit code means.
func describeExit(code int) string {
	if code > 128 && code < 128+65 {
		return "terminated by " + SignalName(syscall.Signal(code-128))
	}
	return "exit status " + strconv.Itoa(code)
}

// orStd returns w, or std if w is nil.
func orStd(w, std io.Writer) io.Writer {
	if w == nil {
		return std
	}
	return w
}
