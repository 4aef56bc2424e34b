package launch

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// The environment of a fault-tolerant job's workers (Config.FT), which
// gotrain's trainers read to build their ddp/ft Manager.
const (
	// EnvFT is "1" in every worker of a fault-tolerant job.
	EnvFT = "GOTRAIN_FT"
	// EnvFTReplicaID is the worker's replica ID, "<host>-<local rank>"
	// with the rank zero-padded: the same when the worker is restarted,
	// and ordered as the ranks are on each host.
	EnvFTReplicaID = "GOTRAIN_FT_REPLICA_ID"
	// EnvFTReplicas is the number of replicas the job starts with (the
	// world size), which the first quorum waits for.
	EnvFTReplicas = "GOTRAIN_FT_REPLICAS"
	// EnvFTMinReplicas is the smallest quorum that trains.
	EnvFTMinReplicas = "GOTRAIN_FT_MIN_REPLICAS"
	// EnvFTJoin is "1" in a worker the launcher restarted, or started
	// with Config.FTJoin ("0" in the others): it joins the running job and
	// heals its state from a live peer (ddp/ft's Step -1) instead of
	// starting from step 0 or a checkpoint.
	EnvFTJoin = "GOTRAIN_FT_JOIN"
	// EnvFTRestartCount is how many times the launcher restarted this
	// worker. GOTRAIN_RESTART_COUNT stays the job's, the same for every
	// worker, since it scopes the store keys that the replicas share.
	EnvFTRestartCount = "GOTRAIN_FT_RESTART_COUNT"
)

// ftState is where one local rank of a fault-tolerant job is.
type ftState int

const (
	ftRunning  ftState = iota
	ftPending          // failed; a restart is scheduled
	ftFinished         // exited 0
	ftDead             // failed with no restart left
)

// replicaID is the stable replica ID of local rank local on host, with
// the characters a replica ID may not hold ('/', ',', spaces) made '_'.
func replicaID(host string, local int) string {
	host = strings.Map(func(r rune) rune {
		if r == '/' || r == ',' || unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, host)
	return fmt.Sprintf("%s-%03d", host, local)
}

// ftHost is the host part of this node's replica IDs: ReplicaHost, else
// the machine's name, with the node rank in a job of several nodes, which
// may share a machine.
func (c Config) ftHost() string {
	if c.ReplicaHost != "" {
		return c.ReplicaHost
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	if c.NNodes > 1 {
		h += "-n" + strconv.Itoa(c.NodeRank)
	}
	return h
}

// minReplicas is the smallest number of live replicas the job trains with.
func (c Config) minReplicas() int {
	return max(1, c.MinReplicas)
}

// validateFT checks the fault-tolerance fields of c.
func (c Config) validateFT() error {
	switch {
	case c.MinReplicas < 0:
		return fmt.Errorf("%w: min-replicas must be at least 1, got %d", ErrConfig, c.MinReplicas)
	case !c.FT && c.FTJoin:
		return fmt.Errorf("%w: joining a running job needs fault tolerance (--ft)", ErrConfig)
	case !c.FT && c.MinReplicas > 0:
		return fmt.Errorf("%w: min-replicas %d needs fault tolerance (--ft)", ErrConfig, c.MinReplicas)
	case !c.FT:
		return nil
	case c.MinReplicas > c.worldSize():
		return fmt.Errorf("%w: min-replicas %d is more than the %d workers of the job", ErrConfig, c.MinReplicas, c.worldSize())
	case c.Rendezvous != nil:
		return fmt.Errorf("%w: --ft does not combine with an elastic rendezvous (--nnodes MIN:MAX): the replicas' quorum already lets workers leave and join", ErrConfig)
	}
	return nil
}

// ftEnv is the fault-tolerance environment of local rank local; join
// marks a restarted worker, which heals from a peer.
func (c Config) ftEnv(local int, join bool) []string {
	env := []string{
		EnvFT + "=1",
		EnvFTReplicaID + "=" + replicaID(c.ftHost(), local),
		EnvFTReplicas + "=" + strconv.Itoa(c.worldSize()),
		EnvFTMinReplicas + "=" + strconv.Itoa(c.minReplicas()),
	}
	// Always set, so that a value inherited from an enclosing job never
	// marks a fresh worker as joining.
	if join {
		return append(env, EnvFTJoin+"=1")
	}
	return append(env, EnvFTJoin+"=0")
}

// serveFTStore serves the job's store at MasterAddr:MasterPort for the
// whole job, so that it outlives any worker (a store served by rank 0
// would die with it). The workers reach it with their TLS settings from
// env, so it serves with the same ones.
func serveFTStore(c Config, token string, env []string) (*store.Server, error) {
	tc, err := tlsconf.LoadEnv(func(k string) (string, bool) { return lookupEnv(env, k) })
	if err != nil {
		return nil, fmt.Errorf("launch: the fault-tolerant job's store: %w", err)
	}
	srv, err := store.Listen(net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort)), []byte(token), store.WithTLS(tc))
	if err != nil {
		return nil, fmt.Errorf("launch: serve the fault-tolerant job's store: %w", err)
	}
	return srv, nil
}

// runFT is the loop of a fault-tolerant job (Config.FT): a worker that
// fails does not stop the others; it is restarted alone, after the
// restart backoff and up to MaxRestarts times per local rank (NoRestart
// is ignored: restarting one replica is this loop's job), as a joining
// replica (EnvFTJoin). The job ends when every worker has exited 0,
// or, with the root cause, when a worker fails with no restart left and
// fewer than MinReplicas workers remain running or scheduled to restart
// (unless the others have all finished: their training is done).
func (j *job) runFT(ctx context.Context) (int, error) {
	c := j.cfg
	n := c.NProcPerNode
	workers := make([]*worker, n)
	state := make([]ftState, n)
	restarts := make([]int, n)
	for i := range restarts {
		restarts[i] = c.RestartCount
	}
	// Every start sends one exit, and a local rank starts at most
	// MaxRestarts+1 times: the buffer never fills, so no goroutine blocks.
	exits := make(chan exitEvent, n*(c.MaxRestarts+1))
	// At most one restart is scheduled per local rank at a time.
	due := make(chan int, n)
	var timers []*time.Timer
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
	}()
	start := func(local int, join bool) error {
		logDir := ""
		if j.logRoot != "" {
			logDir = filepath.Join(j.logRoot, "attempt_"+strconv.Itoa(restarts[local]))
		}
		env := append(j.env.environ(local, c.RestartCount), c.ftEnv(local, join)...)
		env = append(env, EnvFTRestartCount+"="+strconv.Itoa(restarts[local]-c.RestartCount))
		w, err := startWorker(workerSpec{
			path:      j.path,
			argv0:     c.Program,
			args:      c.Args,
			env:       env,
			localRank: local,
			rank:      c.globalRank(local),
			stdout:    j.stdout,
			stderr:    j.stderr,
			events:    j.events,
			logDir:    logDir,
			route:     c.route(local),
			reaper:    j.reaper,
		})
		if err != nil {
			return err
		}
		workers[local], state[local] = w, ftRunning
		go func() {
			_ = w.cmd.Wait() // the exit status is in ProcessState
			exits <- exitEvent{idx: local, code: exitCode(w.cmd.ProcessState)}
		}()
		return nil
	}
	started := func() []*worker {
		var ws []*worker
		for _, w := range workers {
			if w != nil {
				ws = append(ws, w)
			}
		}
		return ws
	}
	// stopAll stops every running worker; exits of workers already
	// recorded are not sent again, so stop indexes by local rank only
	// the workers that were started.
	stopAll := func(sig syscall.Signal) {
		ws := started()
		if len(ws) == len(workers) {
			j.stop(workers, exits, sig)
		} else {
			j.stop(ws, exits, sig) // only during the first start: ranks 0..len(ws)-1
		}
		finishOutput(ws)
	}

	j.log.Info("launch: starting fault-tolerant workers",
		"program", c.Program, "nproc_per_node", n, "node_rank", c.NodeRank, "nnodes", c.NNodes,
		"world_size", c.worldSize(), "min_replicas", c.minReplicas(), "max_restarts", c.MaxRestarts,
		"master_addr", c.MasterAddr, "master_port", c.MasterPort, "run_id", c.RunID)
	for local := range n {
		beforeStart(local)
		if ctx.Err() != nil {
			sig := StopSignal(ctx)
			stopAll(sig)
			return j.interrupted(ctx, sig)
		}
		if err := start(local, c.FTJoin || c.RestartCount > 0); err != nil {
			stopAll(syscall.SIGKILL)
			return 1, err
		}
	}

	count := func(s ftState) int {
		k := 0
		for _, st := range state {
			if st == s {
				k++
			}
		}
		return k
	}
	survived := 0
	for count(ftRunning)+count(ftPending) > 0 {
		select {
		case <-ctx.Done():
			sig := StopSignal(ctx)
			j.log.Warn("launch: interrupted, stopping workers", "signal", sig.String(), "cause", context.Cause(ctx))
			stopAll(sig)
			return j.interrupted(ctx, sig)
		case local := <-due:
			if state[local] != ftPending {
				continue
			}
			j.log.Warn("launch: restarting a failed worker as a joining replica",
				"rank", c.globalRank(local), "local_rank", local, "replica_id", replicaID(c.ftHost(), local),
				"restart_count", restarts[local], "max_restarts", c.MaxRestarts)
			// With no live peer there is nobody to heal from: the
			// replica starts over from the job's starting state.
			if err := start(local, count(ftRunning) > 0); err != nil {
				stopAll(syscall.SIGKILL)
				return 1, err
			}
		case ev := <-exits:
			w := workers[ev.idx]
			w.exited, w.code = true, ev.code
			if w.groupAlive() {
				// What the worker left in its group goes with it; the
				// replica's restart must not meet its predecessor's children.
				w.signalGroup(syscall.SIGKILL)
			}
			w.finishOutput(time.Now().Add(drainWait))
			if ev.code == 0 {
				state[ev.idx] = ftFinished
				continue
			}
			f := j.failure(w, restarts[ev.idx])
			f.Time = time.Now()
			survived++
			live := count(ftRunning) - 1 + count(ftPending)
			if restarts[ev.idx] < c.MaxRestarts {
				state[ev.idx] = ftPending
				restarts[ev.idx]++
				delay := RestartDelay(c.RestartBackoff, c.MaxRestartBackoff, restarts[ev.idx]-c.RestartCount)
				j.log.Warn(fmt.Sprintf("launch: worker failed; the other %d go on; restarting it in %v (restart %d of %d)", live, delay, restarts[ev.idx], c.MaxRestarts),
					"rank", w.rank, "local_rank", w.localRank, "pid", w.pid(), "exit_code", ev.code, "cause", describeExit(ev.code),
					"replica_id", replicaID(c.ftHost(), ev.idx), "live_replicas", live, "min_replicas", c.minReplicas())
				local := ev.idx
				timers = append(timers, time.AfterFunc(delay, func() { due <- local }))
				continue
			}
			state[ev.idx] = ftDead
			finished := count(ftFinished)
			if live >= c.minReplicas() || (live == 0 && finished > 0) {
				j.log.Warn(fmt.Sprintf("launch: worker failed with no restart left (--max-restarts %d); the other %d go on", c.MaxRestarts, live),
					append(f.attrs(), "live_replicas", live, "min_replicas", c.minReplicas())...)
				continue
			}
			j.log.Error(fmt.Sprintf("launch: %d replicas remain, fewer than --min-replicas %d, and none can be restarted; stopping the job", live, c.minReplicas()),
				"live_replicas", live, "min_replicas", c.minReplicas())
			stopAll(syscall.SIGTERM)
			j.reportFailure(f)
			return f.ExitCode, nil
		}
	}
	j.log.Info("launch: all workers finished", "failures_survived", survived,
		"finished", count(ftFinished), "lost", count(ftDead))
	return 0, nil
}
