// Package fanout launches a job on several machines from any machine: it
// starts `gotrain agent` on every host over the user's OpenSSH client,
// hands each its share of the job (token included) on stdin, and then
// decides for all of them: when any worker on any node fails every node is
// stopped, and either all restart together or the job ends with that
// worker's exit code after one root-cause report. The agents' output,
// progress events and log files come back here.
package fanout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/agent"
	"github.com/gotrain/gotrain/launch/hosts"
	"github.com/gotrain/gotrain/launch/ssh"
)

// DefaultExitWait is how long nodes that finished wait for the others
// before the job is declared failed.
const DefaultExitWait = 60 * time.Second

// Timing bounds of the launcher.
const (
	// readyWait bounds the wait for every agent to start (ssh's own
	// connect timeout is 10 s).
	readyWait = 30 * time.Second
	// stopSlack is added to the stop timeout for stopped nodes to report;
	// a node silent past it is given up (its agent then stops its
	// workers itself when its stdin closes).
	stopSlack = 7 * time.Second
	// closeWait bounds the wait for the ssh processes to end.
	closeWait = 10 * time.Second
)

// ErrNodeLost is wrapped by the error of a job one of whose agents could
// not be started or went away.
var ErrNodeLost = errors.New("fanout: node lost")

// Config is a job on several hosts. Hosts and Program are required.
type Config struct {
	// Hosts are the machines, node 0 first; its address (Addr) is the
	// master address every node dials.
	Hosts []hosts.Host
	// SSH is how the hosts are reached.
	SSH ssh.Client
	// Gotrain is the path of gotrain on the hosts ("" means the absolute
	// path of this executable, the same on every host); GotrainOn
	// overrides it per host name (--copy's cache paths).
	Gotrain   string
	GotrainOn map[string]string
	// Program and Args are the workers' command; ProgramOn overrides
	// Program per host name.
	Program   string
	Args      []string
	ProgramOn map[string]string
	// NProcPerNode is the workers on every node; 0 means each host's own
	// slots (1 where not given), which may differ from host to host (see
	// Workers).
	NProcPerNode int
	// MasterPort is the rendezvous store's port on node 0 (0 means 29500).
	MasterPort int
	// MaxRestarts is how many times all nodes restart together.
	MaxRestarts int
	// RestartBackoff and MaxRestartBackoff are the wait before a restart
	// of every node, as launch.Config's: RestartBackoff before the first,
	// doubling up to MaxRestartBackoff (0 means the launch package's
	// defaults, a negative RestartBackoff no wait).
	RestartBackoff, MaxRestartBackoff time.Duration
	// ExitWait bounds how long finished nodes wait for running ones
	// (0 means DefaultExitWait).
	ExitWait time.Duration
	// StopTimeout and MonitorInterval are each node's launch.Config's.
	StopTimeout, MonitorInterval time.Duration
	// HeartbeatTimeout is how long a silent agent (or launcher, for the
	// agents) is given before it counts as lost (0 means 5 s).
	HeartbeatTimeout time.Duration
	// RunID names the job ("" means a random one).
	RunID string
	// LogDir, if set, collects every node's worker logs here, in
	// LogDir/<run id>_<random>/<host>/attempt_<restart>/<local rank>/.
	LogDir string
	// Redirects, Tee and LocalRanksFilter are each node's launch.Config's.
	Redirects, Tee   launch.Streams
	LocalRanksFilter []int
	// Env is added to the workers' environment on every host (the
	// launcher's GOTRAIN_* settings: see ForwardEnv).
	Env []string
	// Token is the job's GOTRAIN_TOKEN ("" means a fresh random one).
	Token string
	// LogFormat is the agents' log format (text or json).
	LogFormat string
	// Stdout and Stderr receive the workers' lines, "[rankN]: " prefixed
	// (nil: os.Stdout, os.Stderr). Calls are never concurrent.
	Stdout, Stderr io.Writer
	// Logger receives the launcher's own records (nil: text on Stderr).
	Logger *slog.Logger
	// Events, if set, receives the workers' progress events by global
	// rank, as launch.Config.Events does.
	Events func(rank int, line []byte)
	// OnFailure receives the root cause when the job fails for good
	// (nil: one Error record on Logger).
	OnFailure func(launch.Failure)
	// FT makes the job fault-tolerant: each node restarts its own failed
	// workers (launch.Config.FT, MaxRestarts per worker), and the job goes
	// on without a node (other than node 0, which serves the store) whose
	// workers all failed or whose agent was lost, while the workers of the
	// other nodes number at least MinReplicas (0 means 1).
	FT          bool
	MinReplicas int
}

// check refuses a Config that cannot run, with errors wrapping
// launch.ErrConfig.
func (c *Config) check() (workers []int, err error) {
	if len(c.Hosts) == 0 {
		return nil, fmt.Errorf("%w: no hosts", launch.ErrConfig)
	}
	if c.Program == "" {
		return nil, fmt.Errorf("%w: no program to run", launch.ErrConfig)
	}
	if c.NProcPerNode < 0 {
		return nil, fmt.Errorf("%w: nproc-per-node must be at least 1, got %d", launch.ErrConfig, c.NProcPerNode)
	}
	allow := os.Getenv(launch.EnvAllowLoopback) == "1"
	for _, kv := range c.Env {
		if kv == launch.EnvAllowLoopback+"=1" {
			allow = true
		}
	}
	if err := launch.CheckMasterAddr(c.Hosts[0].Addr(), len(c.Hosts), allow); err != nil {
		return nil, fmt.Errorf("%w: node 0 %s: %w", launch.ErrConfig, c.Hosts[0].Addr(), err)
	}
	if c.MaxRestarts < 0 || c.ExitWait < 0 {
		return nil, fmt.Errorf("%w: negative max-restarts or exit-wait", launch.ErrConfig)
	}
	if c.RestartBackoff == 0 {
		c.RestartBackoff = launch.DefaultRestartBackoff
	}
	if c.MaxRestartBackoff == 0 {
		c.MaxRestartBackoff = launch.DefaultMaxRestartBackoff
	}
	return c.Workers(), nil
}

// Workers is how many workers each host runs, in host order:
// NProcPerNode on every host if set, else each host's slots (1 where the
// list gives none). Global ranks follow this order: node 0's workers are
// ranks 0..Workers()[0]-1, node 1's the next ones, and so on.
func (c Config) Workers() []int {
	n := make([]int, len(c.Hosts))
	for i, h := range c.Hosts {
		n[i] = c.NProcPerNode
		if n[i] == 0 {
			n[i] = max(h.Slots, 1)
		}
	}
	return n
}

// forwarded are the prefixes of the launcher's variables ForwardEnv passes
// on; notForwarded are the ones under them that describe this machine or
// this process only.
var (
	forwarded    = []string{"GOTRAIN_", "GLOO_SOCKET_IFNAME=", "NCCL_SOCKET_IFNAME="}
	notForwarded = []string{"GOTRAIN_SSH=", "GOTRAIN_TOKEN=", "GOTRAIN_EVENTS_FD=", "GOTRAIN_LAUNCH_REAPER=",
		"GOTRAIN_RESTART_COUNT=", "GOTRAIN_RUN_ID=", "GOTRAIN_AGENT_STORE=",
		// What each node's launcher sets for a fault-tolerant job's workers.
		"GOTRAIN_FT=", "GOTRAIN_FT_REPLICA_ID=", "GOTRAIN_FT_REPLICAS=", "GOTRAIN_FT_MIN_REPLICAS=", "GOTRAIN_FT_JOIN=", "GOTRAIN_FT_RESTART_COUNT="}
)

// ForwardEnv returns the variables of environ that a job on several hosts
// gives every host's workers: gotrain's settings (GOTRAIN_*, such as
// GOTRAIN_SOCKET_IFNAME, GOTRAIN_PORT_RANGE, GOTRAIN_TIMEOUT) and
// GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME, without the ones that only make
// sense on this machine (GOTRAIN_SSH, GOTRAIN_EVENTS_FD) or that the job
// sets itself (GOTRAIN_TOKEN, GOTRAIN_RUN_ID, ...). ssh passes no
// environment, so this is how the hosts get them.
func ForwardEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if hasAnyPrefix(kv, forwarded) && !hasAnyPrefix(kv, notForwarded) {
			out = append(out, kv)
		}
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Run runs the job on every host and returns as launch.Run does: (0, nil)
// when every worker everywhere exited 0; the root-cause worker's exit code
// (128+signal) and nil after a failure with no restart left, once every
// node's workers are stopped; 128+signal and an error wrapping
// launch.ErrInterrupted when ctx ended (a launch.SignalError cause is
// forwarded to the workers); 1 and an error when the job could not start
// (bad Config: launch.ErrConfig; an agent that did not start: ErrNodeLost
// and the ssh failure, naming the host).
//
// Every agent is started and has reported ready before any worker starts.
// An agent whose connection ends or that sends nothing for
// HeartbeatTimeout is lost: the other nodes are stopped and the job fails
// without a restart. Nodes that finished while others still run wait at
// most ExitWait, then the job fails naming the nodes still running.
func Run(ctx context.Context, cfg Config) (int, error) {
	workers, err := cfg.check()
	if err != nil {
		return 1, err
	}
	l, err := newLauncher(cfg, workers)
	if err != nil {
		return 1, err
	}
	defer l.close()
	if err := l.start(ctx); err != nil {
		return 1, err
	}
	return l.run(ctx)
}

// launcher is one Run call.
type launcher struct {
	cfg     Config
	workers []int // per node, in node order
	offsets []int // the global rank of each node's local rank 0
	world   int   // the workers of every node
	token   string
	runID   string
	log     *slog.Logger
	stdout  io.Writer
	stderr  io.Writer
	nodes   []*node
	msgs    chan nodeMsg
	logRoot string
	files   map[string]*os.File
}

func newLauncher(cfg Config, workers []int) (*launcher, error) {
	if cfg.ExitWait == 0 {
		cfg.ExitWait = DefaultExitWait
	}
	if cfg.MasterPort == 0 {
		cfg.MasterPort = launch.DefaultMasterPort
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = agent.DefaultHeartbeatTimeout
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = launch.DefaultStopTimeout
	}
	l := &launcher{cfg: cfg, workers: workers, token: cfg.Token, runID: cfg.RunID,
		stdout: orStd(cfg.Stdout, os.Stdout), stderr: orStd(cfg.Stderr, os.Stderr),
		msgs: make(chan nodeMsg, 256), files: map[string]*os.File{}}
	l.log = cfg.Logger
	if l.log == nil {
		l.log = slog.New(slog.NewTextHandler(l.stderr, nil))
	}
	for _, n := range workers {
		l.offsets = append(l.offsets, l.world)
		l.world += n
	}
	if l.token == "" {
		l.token = randomHex(32)
	}
	if l.runID == "" {
		l.runID = randomHex(8)
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return nil, fmt.Errorf("fanout: log directory: %w", err)
		}
		var err error
		if l.logRoot, err = os.MkdirTemp(cfg.LogDir, safeName(l.runID)+"_"); err != nil {
			return nil, fmt.Errorf("fanout: log directory: %w", err)
		}
		l.log.Info("fanout: collecting worker logs", "dir", l.logRoot)
	}
	return l, nil
}

// job is node i's share of the job.
func (l *launcher) job(i int) agent.Job {
	c := l.cfg
	h := c.Hosts[i]
	prog := c.Program
	if p, ok := c.ProgramOn[h.Name]; ok {
		prog = p
	}
	dir, _ := os.Getwd()
	return agent.Job{
		Host: h.Name, Dir: dir, Program: prog, Args: c.Args, Env: c.Env, Token: l.token,
		NodeRank: i, NNodes: len(c.Hosts), NProcPerNode: l.workers[i],
		RankOffset: l.offsets[i], WorldSize: l.world,
		MasterAddr: c.Hosts[0].Addr(), MasterPort: c.MasterPort,
		RunID: l.runID, MaxRestarts: c.MaxRestarts,
		StopTimeout: c.StopTimeout, MonitorInterval: c.MonitorInterval,
		HeartbeatTimeout: c.HeartbeatTimeout, LogDir: c.LogDir != "",
		Redirects: c.Redirects, Tee: c.Tee, LocalRanksFilter: c.LocalRanksFilter,
		Events: c.Events != nil, LogFormat: c.LogFormat,
		FT: c.FT,
	}
}

// agentCommand is the remote command that starts node i's agent.
func (l *launcher) agentCommand(i int) ([]string, error) {
	bin := l.cfg.Gotrain
	if p, ok := l.cfg.GotrainOn[l.cfg.Hosts[i].Name]; ok {
		bin = p
	}
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("fanout: find this gotrain binary: %w", err)
		}
		bin = self
	}
	return []string{bin, "agent"}, nil
}

// start starts every agent and waits until all are ready.
func (l *launcher) start(ctx context.Context) error {
	for i, h := range l.cfg.Hosts {
		argv, err := l.agentCommand(i)
		if err != nil {
			return err
		}
		n, err := startNode(l.cfg.SSH, i, h.Name, argv, l.job(i), l.msgs, l.stderr)
		if err != nil {
			return err
		}
		l.nodes = append(l.nodes, n)
	}
	l.log.Info("fanout: agents starting", "hosts", len(l.nodes), "workers", fmt.Sprint(l.workers),
		"world_size", l.world, "master", fmt.Sprintf("%s:%d", l.cfg.Hosts[0].Addr(), l.cfg.MasterPort), "run_id", l.runID)
	ready := 0
	deadline := time.NewTimer(readyWait)
	defer deadline.Stop()
	// The agents that are up must hear from the launcher while the others
	// connect, or they would count it as lost.
	beat := time.NewTicker(agent.HeartbeatInterval)
	defer beat.Stop()
	for ready < len(l.nodes) {
		select {
		case <-beat.C:
			for _, n := range l.nodes {
				n.send(agent.Message{Type: agent.Heartbeat})
			}
		case m := <-l.msgs:
			n := l.nodes[m.node]
			n.seen = time.Now()
			switch {
			case m.err != nil:
				return fmt.Errorf("%w: %w", ErrNodeLost, n.failure(m.err))
			case m.Type == agent.Ready && !n.ready:
				n.ready = true
				ready++
			case m.Type == agent.Exit && m.Error != "":
				return fmt.Errorf("%w: host %s: %s", ErrNodeLost, n.host, m.Error)
			default:
				l.handleIO(m)
			}
		case <-deadline.C:
			var slow []string
			for _, n := range l.nodes {
				if !n.ready {
					slow = append(slow, n.host)
				}
			}
			return fmt.Errorf("%w: the agent did not start within %v on %s", ErrNodeLost, readyWait, strings.Join(slow, ", "))
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", launch.ErrInterrupted, context.Cause(ctx))
		}
	}
	return nil
}

// run runs attempts until the job ends.
func (l *launcher) run(ctx context.Context) (int, error) {
	c := l.cfg
	for restart := 0; ; restart++ {
		l.log.Info("fanout: starting workers on every node", "restart_count", restart, "nodes", len(l.nodes))
		g, err := l.attempt(ctx, restart)
		if err != nil {
			return 1, err
		}
		ok, code, restartable := g.verdict()
		switch {
		case g.signal != 0:
			return code, fmt.Errorf("%w: %w", launch.ErrInterrupted, context.Cause(ctx))
		case ok:
			l.log.Info("fanout: all workers on every node finished", "restart_count", restart)
			return 0, nil
		case restartable && restart < c.MaxRestarts:
			cause := "?"
			if f := g.failure(); f != nil {
				cause = f.Cause()
				if f.Rank >= 0 {
					cause = fmt.Sprintf("rank %d on %s: %s", f.Rank, f.Host, cause)
				}
			}
			delay := launch.RestartDelay(c.RestartBackoff, c.MaxRestartBackoff, restart+1)
			l.log.Warn(fmt.Sprintf("fanout: restarting every node in %v (restart %d of %d)", delay, restart+1, c.MaxRestarts),
				"root_cause", cause, "exit_code", code, "restart_count", restart+1, "max_restarts", c.MaxRestarts)
			if err := l.waitRestart(ctx, delay); err != nil {
				return 1, err
			}
			if ctx.Err() != nil {
				return 128 + int(launch.StopSignal(ctx)), fmt.Errorf("%w: %w", launch.ErrInterrupted, context.Cause(ctx))
			}
		default:
			l.reportFailure(g, restart, code)
			return code, nil
		}
	}
}

// attempt runs attempt restart on every node until all have ended.
func (l *launcher) attempt(ctx context.Context, restart int) (*gang, error) {
	names := make([]string, len(l.nodes))
	for i, n := range l.nodes {
		names[i] = n.host
		if n.gone {
			return nil, fmt.Errorf("%w: host %s", ErrNodeLost, n.host)
		}
	}
	g := newGang(names)
	g.offsets, g.workers = l.offsets, l.workers
	g.ft, g.minReplicas = l.cfg.FT, l.cfg.MinReplicas
	for _, n := range l.nodes {
		n.send(agent.Message{Type: agent.Start, Restart: restart})
	}
	beat := time.NewTicker(agent.HeartbeatInterval)
	defer beat.Stop()
	var exitWait, stopDeadline, grace <-chan time.Time
	ctxDone := ctx.Done()
	stop := func(nodes []int, sig syscall.Signal) {
		for _, i := range nodes {
			l.nodes[i].send(agent.Message{Type: agent.Stop, Signal: int(sig)})
		}
		if len(nodes) > 0 && stopDeadline == nil {
			stopDeadline = time.After(l.cfg.StopTimeout + stopSlack)
		}
	}
	for !g.done() {
		select {
		case m := <-l.msgs:
			n := l.nodes[m.node]
			n.seen = time.Now()
			switch {
			case m.err != nil:
				err := n.failure(m.err)
				l.log.Error("fanout: lost the agent", "host", n.host, "err", err)
				stop(g.lostNode(m.node, err.Error(), time.Now()), 0)
			case m.Type == agent.Failed && m.Restart == restart:
				if nodes := g.failed(m.node, m.Failure, time.Now()); len(nodes) > 0 {
					l.log.Warn("fanout: a worker failed; stopping every node", "host", n.host,
						"rank", m.Failure.Rank, "cause", m.Failure.Cause())
					stop(nodes, 0)
				}
			case m.Type == agent.Exit && m.Restart == restart:
				if m.Error != "" {
					l.log.Error("fanout: a node could not run its workers", "host", n.host, "err", m.Error)
				}
				if nodes := g.exited(m.node, m.Code, m.Failure, m.Interrupted, m.Error, time.Now()); len(nodes) > 0 {
					l.log.Warn("fanout: a node failed; stopping every node", "host", n.host, "exit_code", m.Code)
					stop(nodes, 0)
				}
			default:
				l.handleIO(m)
			}
		case <-beat.C:
			for i, n := range l.nodes {
				n.send(agent.Message{Type: agent.Heartbeat})
				if g.running[i] && time.Since(n.seen) > l.cfg.HeartbeatTimeout {
					why := fmt.Sprintf("host %s: the agent sent nothing for %v", n.host, l.cfg.HeartbeatTimeout)
					l.log.Error("fanout: lost the agent", "host", n.host, "err", why)
					n.abandon()
					stop(g.lostNode(i, why, time.Now()), 0)
				}
			}
		case <-grace:
			grace = nil
			l.log.Warn("fanout: no worker failed on its own within the stop timeout after one failed because of another rank; stopping every node")
			stop(g.graceOver(), 0)
		case <-exitWait:
			exitWait = nil
			nodes := g.exitWaitOver(l.cfg.ExitWait)
			l.log.Error("fanout: "+g.rootErr+"; stopping them", "exit_wait", l.cfg.ExitWait)
			stop(nodes, 0)
		case <-stopDeadline:
			for i, n := range l.nodes {
				if g.running[i] {
					why := fmt.Sprintf("host %s: the agent did not report its workers stopped within %v", n.host, l.cfg.StopTimeout+stopSlack)
					l.log.Error("fanout: giving up on a node", "host", n.host, "err", why)
					n.abandon()
					g.lostNode(i, why, time.Now())
				}
			}
		case <-ctxDone:
			ctxDone = nil
			sig := launch.StopSignal(ctx)
			l.log.Warn("fanout: interrupted, stopping every node", "signal", sig.String())
			stop(g.interrupt(sig), sig)
		}
		l.logDropped(g)
		if grace == nil && g.graceDue {
			// The fallout of a failure often arrives before it: wait for
			// the failure itself as a node waits for its own workers'.
			grace = time.After(l.cfg.StopTimeout)
		}
		if exitWait == nil && g.needExitWait() {
			exitWait = time.After(l.cfg.ExitWait)
		}
	}
	return g, nil
}

// handleIO passes on the workers' output, events and log files.
func (l *launcher) handleIO(m nodeMsg) {
	switch m.Type {
	case agent.Output:
		w := l.stdout
		if m.Stream == 2 {
			w = l.stderr
		}
		_, _ = w.Write(m.Data)
	case agent.Event:
		if l.cfg.Events != nil {
			l.cfg.Events(m.Rank, m.Data)
		}
	case agent.File:
		l.writeLog(m)
	}
}

// writeLog appends a piece of a node's log file under the log directory.
func (l *launcher) writeLog(m nodeMsg) {
	if l.logRoot == "" {
		return
	}
	rel := filepath.FromSlash(m.Path)
	if !filepath.IsLocal(rel) {
		l.log.Error("fanout: a log file path leaves the log directory; dropped", "host", l.nodes[m.node].host, "path", m.Path)
		return
	}
	path := filepath.Join(l.logRoot, safeName(l.nodes[m.node].host), rel)
	f := l.files[path]
	if f == nil {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			l.log.Error("fanout: worker log", "err", err)
			return
		}
		var err error
		if f, err = os.Create(path); err != nil {
			l.log.Error("fanout: worker log", "err", err)
			return
		}
		l.files[path] = f
	}
	if _, err := f.Write(m.Data); err != nil {
		l.log.Error("fanout: worker log", "file", path, "err", err)
	}
}

// reportFailure hands the root cause to OnFailure, or logs it. When no
// worker's failure is the cause (a node could not run its workers, or
// --exit-wait ran out) the report says so in its Reason.
func (l *launcher) reportFailure(g *gang, restarts, code int) {
	f := g.failure()
	switch {
	case g.exitWait:
		f = &launch.Failure{Rank: -1, ExitCode: code, Reason: g.rootErr}
	case f == nil && g.root >= 0:
		f = &launch.Failure{Rank: -1, ExitCode: code, Reason: fmt.Sprintf("node %d (host %s): %s", g.root, g.hosts[g.root], g.rootErr)}
	case f == nil:
		f = &launch.Failure{Rank: -1, ExitCode: code, Reason: "a worker failed, and no node reported which"}
	}
	f.Restarts, f.MaxRestarts = restarts, l.cfg.MaxRestarts
	if l.cfg.OnFailure != nil {
		l.cfg.OnFailure(*f)
		return
	}
	l.log.Error("fanout: job failed", "rank", f.Rank, "host", f.Host, "pid", f.PID, "exit_code", f.ExitCode,
		"cause", f.Cause(), "blamed_by", f.BlamedBy, "stderr_tail", f.Stderr)
}

// close ends every agent (closing its stdin stops it) and waits for the
// ssh processes, bounded, passing on their last output meanwhile; it
// closes the log files.
func (l *launcher) close() {
	for _, n := range l.nodes {
		n.closeInput()
	}
	stop, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case m := <-l.msgs:
				if m.err == nil {
					l.handleIO(m)
				}
			case <-stop:
				return
			}
		}
	}()
	deadline := time.Now().Add(closeWait)
	for _, n := range l.nodes {
		n.wait(deadline)
	}
	close(stop)
	<-drained
	for drain := true; drain; {
		select {
		case m := <-l.msgs:
			if m.err == nil {
				l.handleIO(m)
			}
		default:
			drain = false
		}
	}
	for _, f := range l.files {
		f.Close()
	}
}

func orStd(w, std io.Writer) io.Writer {
	if w == nil {
		return std
	}
	return w
}

// safeName makes s usable as one path element.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == 0 {
			return '_'
		}
		return r
	}, s)
}

// exitErr is the classified failure of an ssh process that has ended.
func exitErr(host string, werr error, stderr *tailBuffer) error {
	if werr == nil {
		return fmt.Errorf("host %s: the agent exited", host)
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ee.ExitCode() < 0 {
		return fmt.Errorf("host %s: the agent's connection ended: ssh %v", host, ee.ProcessState)
	}
	if errors.As(werr, &ee) && ee.ExitCode() == 127 {
		return fmt.Errorf("host %s: gotrain not found there (%s); install it at the same path or use --copy", host, strings.TrimSpace(stderr.last()))
	}
	return ssh.Classify(host, werr, stderr.String())
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const tailKeep = 8 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if t.buf.Len() > 2*tailKeep {
		b := append([]byte(nil), t.buf.Bytes()[t.buf.Len()-tailKeep:]...)
		t.buf.Reset()
		t.buf.Write(b)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

func (t *tailBuffer) last() string {
	lines := strings.Split(strings.TrimSpace(t.String()), "\n")
	return lines[len(lines)-1]
}

// waitRestart waits d before a restart, or until ctx ends, keeping the
// agents' heartbeat (they would count a silent launcher as lost) and
// passing on what they send. A lost agent ends the wait with an error.
func (l *launcher) waitRestart(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	beat := time.NewTicker(agent.HeartbeatInterval)
	defer beat.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		case <-beat.C:
			for _, n := range l.nodes {
				n.send(agent.Message{Type: agent.Heartbeat})
			}
		case m := <-l.msgs:
			n := l.nodes[m.node]
			n.seen = time.Now()
			if m.err != nil {
				return fmt.Errorf("%w: %w", ErrNodeLost, n.failure(m.err))
			}
			l.handleIO(m)
		}
	}
}
