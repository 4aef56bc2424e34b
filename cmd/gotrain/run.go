package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/rendezvous"
)

// runFlags are the flags of `gotrain run` that a launcher takes on one
// node, named as torchrun names them.
type runFlags struct {
	nprocPerNode    string
	nnodes          string
	nodeRank        int
	masterAddr      string
	masterPort      int
	standalone      bool
	maxRestarts     int
	monitorInterval string
	stopTimeout     string
	logDir          string
	runID           string
	noPython        bool
	output          outputFlags
	timeout         timeoutFlag
	tls             tlsFlags
	logEvery        string
	ft              ftFlags
}

// runOptions are all of `gotrain run`'s flags, by concern.
type runOptions struct {
	runFlags
	elastic elasticFlags // the rendezvous of an elastic job
	hosts   hostFlags    // a job on several machines over ssh
	observe observeFlags // what the launcher records and serves
	force   forceFlag    // start beyond the machine's bounds
	backoff backoffFlag  // the wait before a restart
}

// newRunCmd is `gotrain run`.
func newRunCmd() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [flags] PROGRAM [ARGS...]",
		Short: "Launch a program's distributed workers, like torchrun",
		Long: `Run starts --nproc-per-node copies of PROGRAM on this node, each with
torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, ...), a
shared random GOTRAIN_TOKEN and GOTRAIN_NUM_THREADS/OMP_NUM_THREADS set to
CPUs / nproc-per-node. Each output line is prefixed with "[rank<N>]: ".

--log-dir also writes each worker's streams to files; --redirects sends
the streams it names to the files only and --tee to both (0 none, 1 stdout,
2 stderr, 3 both, or per local rank: 0:3,1:2), and --local-ranks-filter 0,1
shows only those local ranks on the console, as with torchrun.

When a worker fails, the others are stopped (SIGTERM, SIGKILL after
--stop-timeout) and either all are restarted (up to --max-restarts) or gotrain
reports the root cause (rank, host, exit status or signal, the last lines of
its stderr) and exits with that worker's exit code (128+signal if a signal
killed it). The root cause is the first rank that failed on its own (an
error, a signal, stopped, gone silent, a node cut off), not the ranks that
failed because of it. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the
workers. A bad flag is refused with one line and exit status 2 before any
worker starts.

PROGRAM is any executable; flags after it are its own. For several nodes run
gotrain run on each with the same --nnodes, --nproc-per-node, --master-addr,
--master-port and GOTRAIN_TOKEN, and its own --node-rank; or, from any
machine, --hosts node0:2,node1:2 (or --hostfile) starts them all over ssh,
checks every host first, and stops or restarts all of them together. For an elastic
job give every node --nnodes MIN:MAX, --rdzv-endpoint, --rdzv-id and the
token instead: nodes may then leave and arrive, and the group re-forms.`,
		Example: `  gotrain run --nproc-per-node 4 ./mytrainer --epochs 5
  gotrain run --standalone --nproc-per-node 2 -- sh -c 'echo $RANK of $WORLD_SIZE'
  GOTRAIN_TOKEN=$(openssl rand -hex 32) gotrain run --nnodes 2 --node-rank 0 \
      --nproc-per-node 2 --master-addr 10.0.0.1 ./mytrainer
  gotrain run --hosts node0:2,node1:2 --copy ./mytrainer`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("run: missing PROGRAM to launch (usage: gotrain run [flags] PROGRAM [ARGS...])")
			}
			return nil
		},
		// After parsing, before RunE: the command line wins over PET_.
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyPETEnv(cmd.Flags(), lookupEnv)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.Flags(), args)
		},
	}
	o.register(cmd.Flags())
	return cmd
}

// register defines every flag of `gotrain run` on f, with its default.
func (o *runOptions) register(f *pflag.FlagSet) {
	// Everything after PROGRAM belongs to PROGRAM, as with torchrun.
	f.SetInterspersed(false)
	// torchrun accepts --nproc_per_node as well as --nproc-per-node, and
	// --rdzv-id for the run id.
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		name = strings.ReplaceAll(name, "_", "-")
		if name == "rdzv-id" {
			name = "run-id"
		}
		return pflag.NormalizedName(name)
	})
	f.StringVar(&o.nprocPerNode, "nproc-per-node", "1", "workers on this node: a number, or auto/cpu for one per CPU")
	f.StringVar(&o.nnodes, "nnodes", "1", "number of nodes: N, or MIN:MAX for an elastic job (with --rdzv-endpoint)")
	f.IntVar(&o.nodeRank, "node-rank", 0, "this node's rank in [0, nnodes)")
	f.StringVar(&o.masterAddr, "master-addr", launch.DefaultMasterAddr, "address of node 0, where rank 0 serves the rendezvous store")
	f.IntVar(&o.masterPort, "master-port", launch.DefaultMasterPort, "port of the rendezvous store on master-addr")
	f.BoolVar(&o.standalone, "standalone", false, "single-node job on a free local port with a random run id")
	f.IntVar(&o.maxRestarts, "max-restarts", 0, "how many times to restart all workers after a failure")
	f.StringVar(&o.monitorInterval, "monitor-interval", seconds(launch.DefaultMonitorInterval), "poll period while stopping workers, in seconds or as a duration (100ms)")
	f.StringVar(&o.stopTimeout, "stop-timeout", launch.DefaultStopTimeout.String(), "grace period between SIGTERM and SIGKILL when stopping workers")
	f.StringVar(&o.logDir, "log-dir", "", "also write each worker's stdout and stderr to files under this directory (see --tee and --redirects)")
	f.StringVar(&o.runID, "run-id", "", `job id given to the workers (default: random with --standalone, "none" otherwise)`)
	f.BoolVar(&o.noPython, "no-python", false, "accepted for torchrun compatibility: PROGRAM is always run directly")
	_ = f.MarkHidden("no-python") // the flag exists; cannot fail
	o.output.register(f)
	o.ft.register(f)
	o.timeout.register(f)
	o.tls.register(f)
	addLogEvery(f, &o.logEvery)

	// torchrun's elastic rendezvous, with --nnodes MIN:MAX and --rdzv-id.
	e := &o.elastic
	f.StringVar(&e.backend, "rdzv-backend", "", "rendezvous of an elastic job: c10d (a store served by the launcher at --rdzv-endpoint, the default with it) or etcd; static (the default without it) uses --node-rank")
	f.StringVar(&e.endpoint, "rdzv-endpoint", "", "HOST:PORT of the rendezvous: the c10d store (served by the node whose address it is) or etcd (host:2379, or several, comma-separated)")
	f.StringVar(&e.conf, "rdzv-conf", "", fmt.Sprintf("rendezvous settings as key=value,...: last_call_timeout (s, default %s), join_timeout (s, default %s), keep_alive_interval (s, default %s), keep_alive_max_attempts (default %d), is_host (c10d: true or false)",
		seconds(rendezvous.DefaultLastCall), seconds(rendezvous.DefaultJoinTimeout), seconds(rendezvous.DefaultHeartbeatInterval), defaultKeepAliveAttempts))
	f.StringVar(&e.local, "local-addr", "", "this node's address as the other nodes reach it (default: the one it reaches --rdzv-endpoint from)")

	o.hosts.register(f)
	o.force.register(f)
	o.backoff.register(f)

	o.observe.registerLauncher(f)
	f.StringVar(&o.observe.metrics, "metrics", "", "write every rank's metrics rows (JSON lines, see package metrics) to this file")
	f.StringVar(&o.observe.trace, "trace", "", "write the merged timeline of every rank (Chrome trace-event JSON) to this file")
}

// checkLauncher checks the flags a launcher takes on one node or on
// several, and returns the monitor interval and stop timeout they give.
func (o runFlags) checkLauncher(f *pflag.FlagSet) (monitor, stop time.Duration, err error) {
	switch {
	case o.masterPort <= 0 || o.masterPort > 65535:
		return 0, 0, badFlag("master-port", o.masterPort, "must be in [1, 65535]")
	case o.maxRestarts < 0:
		return 0, 0, badFlag("max-restarts", o.maxRestarts, "must be at least 0")
	}
	if err := o.timeout.check(f); err != nil {
		return 0, 0, err
	}
	if monitor, err = parseInterval(o.monitorInterval); err != nil {
		return 0, 0, badFlag("monitor-interval", o.monitorInterval, err.Error())
	}
	if stop, err = parseInterval(o.stopTimeout); err != nil {
		return 0, 0, badFlag("stop-timeout", o.stopTimeout, err.Error())
	}
	if o.logDir != "" {
		if err := checkWritableDir("log-dir", o.logDir); err != nil {
			return 0, 0, err
		}
	}
	return monitor, stop, nil
}

// runConfig turns the flags and arguments into a launch.Config, refusing
// with a usage error any value the launcher would not run with. An
// elastic job's static place goes back to its defaults in o.
func runConfig(f *pflag.FlagSet, o *runOptions, args []string) (launch.Config, error) {
	cfg := launch.Config{
		Program:     args[0],
		Args:        args[1:],
		NodeRank:    o.nodeRank,
		MasterAddr:  o.masterAddr,
		MasterPort:  o.masterPort,
		Standalone:  o.standalone,
		MaxRestarts: o.maxRestarts,
		LogDir:      o.logDir,
		RunID:       o.runID,
	}
	var err error
	if cfg.NProcPerNode, err = parseNProcPerNode(o.nprocPerNode); err != nil {
		return cfg, badFlag("nproc-per-node", o.nprocPerNode, err.Error())
	}
	// An elastic job (elastic.go) passes as one node: its rounds place it.
	if cfg.NNodes, err = o.elastic.nnodes(f, &o.runFlags); err != nil {
		return cfg, err
	}
	addrErr := launch.CheckMasterAddr(o.masterAddr, cfg.NNodes, os.Getenv(launch.EnvAllowLoopback) == "1")
	switch {
	case o.nodeRank < 0 || o.nodeRank >= cfg.NNodes:
		return cfg, badFlag("node-rank", o.nodeRank, fmt.Sprintf("must be in [0, %d) for --nnodes %s", cfg.NNodes, o.nnodes))
	case o.standalone && cfg.NNodes > 1:
		return cfg, badFlag("nnodes", o.nnodes, "--standalone runs a single node")
	case o.masterAddr == "":
		return cfg, badFlag("master-addr", o.masterAddr, "must be a host name or IP address")
	case addrErr != nil:
		return cfg, badFlag("master-addr", o.masterAddr, addrErr.Error())
	}
	if cfg.MonitorInterval, cfg.StopTimeout, err = o.checkLauncher(f); err != nil {
		return cfg, err
	}
	if err := o.tls.check(false); err != nil {
		return cfg, err
	}
	if err := o.output.apply(f, &cfg); err != nil {
		return cfg, err
	}
	if _, err := exec.LookPath(cfg.Program); err != nil {
		return cfg, usagef("run: cannot run PROGRAM %s: %s", showValue(cfg.Program), rootCause(err))
	}
	if err := o.backoff.check(); err != nil {
		return cfg, err
	}
	o.backoff.apply(&cfg)
	if err := o.ft.check(f, args, false); err != nil {
		return cfg, err
	}
	o.ft.apply(&cfg, args)
	if cfg.FT && cfg.MinReplicas > cfg.NNodes*cfg.NProcPerNode {
		return cfg, badFlag("min-replicas", o.ft.minReplicas, fmt.Sprintf("is more than the %d workers of the job", cfg.NNodes*cfg.NProcPerNode))
	}
	if cfg.FT && o.elastic.endpoint != "" {
		return cfg, flagNeeds("ft", "does not combine with an elastic rendezvous (--rdzv-endpoint): the replicas' quorum already lets workers leave and join")
	}
	if err := checkSizes(sizeCheck{nproc: cfg.NProcPerNode, nprocFlag: o.nprocPerNode, world: cfg.NNodes * cfg.NProcPerNode}, o.force.on); err != nil {
		return cfg, err
	}
	if o.standalone && !f.Changed("master-port") {
		cfg.MasterPort = 0 // a free port
	}
	return cfg, nil
}

// run launches the job of the parsed flags f and args.
func (o *runOptions) run(ctx context.Context, f *pflag.FlagSet, args []string) error {
	if o.hosts.applies(f) {
		return runOnHosts(ctx, f, o, args)
	}
	cfg, err := runConfig(f, o, args)
	if err == nil {
		err = checkMasterResolves(ctx, cfg)
	}
	if err != nil {
		return refuseNode(ctx, o, f, os.Stderr, err)
	}
	every, err := logEvery(o.logEvery)
	if err != nil {
		return err
	}
	// The console first: the launcher's records then print through it.
	cons := attachConsole(&cfg, every)
	defer cons.Close()
	o.timeout.export()
	o.tls.export()
	o.output.setupLauncherLog(&cfg)
	if err := o.observe.check(f, false, cfg.NProcPerNode, true); err != nil {
		return err
	}
	obs, err := o.observe.attach(&cfg)
	if err != nil {
		return err
	}
	// main's context is cancelled by SIGINT and SIGTERM without saying
	// which; the workers should get the very signal the user sent, so
	// catch the signals here and pass them on as the cancellation cause.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(&launch.SignalError{Signal: s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()

	leave, err := o.elastic.attach(ctx, f, &cfg)
	if err != nil {
		return err
	}
	defer leave()
	warnBeforeStart(cfg)
	code, err := launch.Run(ctx, cfg)
	obs.done(code, err)
	if err != nil && !errors.Is(err, launch.ErrInterrupted) {
		return err
	}
	if code != 0 {
		// Run has logged which rank failed or which signal stopped the job.
		return exitCodeError(code)
	}
	return nil
}
