package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/internal/logging"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/fanout"
	"github.com/gotrain/gotrain/launch/hosts"
	"github.com/gotrain/gotrain/launch/preflight"
	"github.com/gotrain/gotrain/launch/ssh"
	"github.com/gotrain/gotrain/progress/console"
)

// hostFlags are the flags that launch a job on several machines over ssh,
// shared by `run` and `train JOB`.
type hostFlags struct {
	hosts         string
	hostfile      string
	sshOptions    []string
	copy          bool
	exitWait      time.Duration
	remoteGotrain string
	masterPort    int // train's; run has its own --master-port
}

// register defines the flags on f.
func (h *hostFlags) register(f *pflag.FlagSet) {
	f.StringVar(&h.hosts, "hosts", "", "run on these machines over ssh: HOST[:SLOTS],... (node 0 first; slots = workers per host unless --nproc-per-node)")
	f.StringVar(&h.hostfile, "hostfile", "", `run on the machines listed in this file, one "HOST slots=N" a line (# comments), as --hosts`)
	f.StringArrayVar(&h.sshOptions, "ssh-option", nil, "with --hosts: an ssh setting KEY=VALUE passed as ssh -o (repeatable)")
	f.BoolVar(&h.copy, "copy", false, "with --hosts: copy this gotrain (and PROGRAM when it is a static executable) to each host's ~/.cache/gotrain/bin/<sha256>/ and run it from there")
	f.DurationVar(&h.exitWait, "exit-wait", fanout.DefaultExitWait, "with --hosts: how long nodes that finished wait for the others before the job fails")
	f.StringVar(&h.remoteGotrain, "remote-gotrain", "", "with --hosts: the path of gotrain on the hosts (default: the path of this gotrain)")
}

// registerTrain defines the flags on `train JOB`'s f, with the
// rendezvous port that `run` has already.
func (h *hostFlags) registerTrain(f *pflag.FlagSet) {
	h.register(f)
	f.IntVar(&h.masterPort, "master-port", launch.DefaultMasterPort, "with --hosts: the rendezvous store's port on node 0")
}

// given reports whether the job runs on several machines.
func (h hostFlags) given() bool { return h.hosts != "" || h.hostfile != "" }

// applies reports whether the command line is about several machines:
// a host list, or a flag that needs one (which check then refuses).
func (h hostFlags) applies(f *pflag.FlagSet) bool {
	if h.given() {
		return true
	}
	for _, name := range hostOnly {
		if f.Changed(name) {
			return true
		}
	}
	return false
}

// hostOnly are the flags that mean something only with --hosts.
var hostOnly = []string{"ssh-option", "copy", "exit-wait", "remote-gotrain"}

// notWithHosts are the flags the host list replaces.
var notWithHosts = map[string]string{
	"nnodes":      "the host list gives the nodes",
	"node-rank":   "each host's place in the list is its node rank",
	"master-addr": "node 0, the first host, is the master",
	"standalone":  "--standalone runs a single node",
}

// check refuses, as one-line usage errors, flags that do not go together
// and bad values, and returns the hosts (nil without --hosts).
func (h hostFlags) check(f *pflag.FlagSet) ([]hosts.Host, error) {
	if !h.given() {
		for _, name := range hostOnly {
			if f.Changed(name) {
				return nil, flagNeeds(name, "needs --hosts or --hostfile")
			}
		}
		return nil, nil
	}
	if h.hosts != "" && h.hostfile != "" {
		return nil, flagNeeds("hosts", "give --hosts or --hostfile, not both")
	}
	for _, name := range []string{"nnodes", "node-rank", "master-addr", "standalone"} {
		if fl := f.Lookup(name); fl != nil && fl.Changed {
			return nil, flagNeeds(name, "not with --hosts or --hostfile: "+notWithHosts[name])
		}
	}
	if h.exitWait <= 0 {
		return nil, badFlag("exit-wait", h.exitWait.String(), "must be a positive duration")
	}
	for _, o := range h.sshOptions {
		if k, _, ok := strings.Cut(o, "="); !ok || k == "" || strings.ContainsAny(o, "\n") {
			return nil, badFlag("ssh-option", o, "must be KEY=VALUE, as ssh -o takes it (e.g. Port=2222)")
		}
	}
	var hs []hosts.Host
	var err error
	if h.hosts != "" {
		if hs, err = hosts.Parse(h.hosts); err != nil {
			return nil, badFlag("hosts", h.hosts, hostsProblem(err))
		}
	} else if hs, err = hosts.ReadFile(h.hostfile); err != nil {
		return nil, badFlag("hostfile", h.hostfile, hostsProblem(err))
	}
	if err := launch.CheckMasterAddr(hs[0].Addr(), len(hs), os.Getenv(launch.EnvAllowLoopback) == "1"); err != nil {
		return nil, badFlag("hosts", hs[0].String(), "node 0's address "+err.Error())
	}
	return hs, nil
}

// hostsProblem says what is wrong with a host list after its flag: a
// syntax error's reason (the flag names the list already), or why the
// hostfile could not be read.
func hostsProblem(err error) string {
	var se *hosts.SyntaxError
	if errors.As(err, &se) {
		return se.Reason
	}
	return err.Error()
}

// nproc is the workers per host: --nproc-per-node if given (a number:
// "auto" would count this machine's CPUs, not the hosts'), else 0 for
// each host's own slots.
func (h hostFlags) nproc(f *pflag.FlagSet, value string) (int, error) {
	if !f.Changed("nproc-per-node") {
		return 0, nil
	}
	if value == "auto" || value == "cpu" || value == "gpu" {
		return 0, badFlag("nproc-per-node", value, "counts this machine's CPUs, not the hosts'; with --hosts give a number, or slots per host")
	}
	n, err := parseNProcPerNode(value)
	if err != nil {
		return 0, badFlag("nproc-per-node", value, err.Error())
	}
	return n, nil
}

// fanoutConfig is the job on hs of the flags of `gotrain run`, checked.
func (h hostFlags) fanoutConfig(f *pflag.FlagSet, o runFlags, hs []hosts.Host, args []string) (fanout.Config, error) {
	cfg := fanout.Config{
		Hosts:       hs,
		SSH:         ssh.Client{Options: h.sshOptions},
		Gotrain:     h.remoteGotrain,
		Program:     args[0],
		Args:        args[1:],
		MasterPort:  o.masterPort,
		MaxRestarts: o.maxRestarts,
		ExitWait:    h.exitWait,
		RunID:       o.runID,
		LogDir:      o.logDir,
	}
	var err error
	if cfg.NProcPerNode, err = h.nproc(f, o.nprocPerNode); err != nil {
		return cfg, err
	}
	if cfg.MonitorInterval, cfg.StopTimeout, err = o.checkLauncher(f); err != nil {
		return cfg, err
	}
	// The output flags name local ranks that every host must have.
	probe := launch.Config{NProcPerNode: slices.Min(cfg.Workers()), LogDir: o.logDir}
	if err := o.output.apply(f, &probe); err != nil {
		return cfg, err
	}
	cfg.Redirects, cfg.Tee, cfg.LocalRanksFilter = probe.Redirects, probe.Tee, probe.LocalRanksFilter
	if err := o.ft.check(f, args, true); err != nil {
		return cfg, err
	}
	world := 0
	for _, n := range cfg.Workers() {
		world += n
	}
	if err := o.ft.applyHosts(&cfg, args, world); err != nil {
		return cfg, err
	}
	if strings.Contains(cfg.Program, "/") && !filepath.IsAbs(cfg.Program) {
		// The hosts run it from the same directory, as mpirun does.
		if abs, err := filepath.Abs(cfg.Program); err == nil {
			cfg.Program = abs
		}
	}
	return cfg, nil
}

// runOnHosts is `gotrain run --hosts`.
func runOnHosts(ctx context.Context, f *pflag.FlagSet, o *runOptions, args []string) error {
	h := o.hosts
	hs, err := h.check(f)
	if err != nil {
		return err
	}
	cfg, err := h.fanoutConfig(f, o.runFlags, hs, args)
	if err != nil {
		return err
	}
	if err := o.backoff.check(); err != nil {
		return err
	}
	o.backoff.applyHosts(&cfg)
	every, err := logEvery(o.logEvery)
	if err != nil {
		return err
	}
	if err := o.tls.check(true); err != nil {
		return err
	}
	o.timeout.export()
	o.tls.export()
	if err := o.observe.check(f, false, 2, true); err != nil { // the launcher serves even one worker
		return err
	}
	return launchOnHosts(ctx, cfg, h, o.output, &o.observe, every, true, nil)
}

// launchOnHosts checks every host (pre-flight, and --copy), then runs the
// job there with the console showing every rank; checkProgram is false
// when the program is gotrain itself; obs, if not nil, says what the
// launcher observes (the rows, spans and endpoints of every host's
// ranks); stdout, if not nil, wraps where
// the workers' stdout lines go ("[rankN]: " and the line); cfg.Events, if
// set, receives the workers' events before the console (`gotrain train`
// takes rank 0's summary); env is added to the workers'.
func launchOnHosts(ctx context.Context, cfg fanout.Config, h hostFlags, output outputFlags, obs *observeFlags, every time.Duration, checkProgram bool, stdout func(io.Writer) io.Writer, env ...string) (err error) {
	format := output.format()
	cfg.LogFormat = format
	world := 0
	for _, n := range cfg.Workers() {
		world += n
	}
	cons := console.New(console.Options{Out: os.Stderr, LogEvery: every, Ranks: world})
	defer cons.Close()
	cfg.Stdout = cons.LineWriter(os.Stdout)
	if stdout != nil {
		cfg.Stdout = stdout(cfg.Stdout)
	}
	cfg.Stderr = &syncWriter{w: cons.Writer()}
	// The events a caller takes (a job's summary) go to it first.
	if take := cfg.Events; take != nil {
		cfg.Events = func(rank int, line []byte) {
			take(rank, line)
			cons.Event(rank, line)
		}
	} else {
		cfg.Events = cons.Event
	}
	log := logging.New(cfg.Stderr, format)
	slog.SetDefault(log)
	cfg.Logger = log
	if format == logging.Text {
		cfg.OnFailure = launch.WriteFailure(cfg.Stderr)
	}
	if obs != nil {
		o, obsEnv, err := obs.attachHosts(&cfg, log)
		if err != nil {
			return err
		}
		env = append(env, obsEnv...)
		if o != nil {
			// An exit code other than 0 comes back as an error here.
			defer func() { o.done(0, err) }()
		}
	}
	cfg.Env = append(append(fanout.ForwardEnv(os.Environ()), logging.EnvFormat+"="+format), env...)

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

	// Every session to a host (pre-flight, the cache, the agent) reuses
	// its first one's connection: one ssh handshake per host.
	ssh, endSSH, err := cfg.SSH.Multiplex()
	if err != nil {
		return err
	}
	defer endSSH()
	cfg.SSH = ssh
	if err := preflightHosts(ctx, &cfg, h, checkProgram); err != nil {
		return err
	}
	code, err := fanout.Run(ctx, cfg)
	if err != nil && !errors.Is(err, launch.ErrInterrupted) {
		return err
	}
	if code != 0 {
		return exitCodeError(code)
	}
	return nil
}

// preflightHosts checks every host at once before any worker starts
// (package preflight) and, with --copy, places gotrain and the program in
// their caches, pointing cfg at the copies. GOTRAIN_NO_PREFLIGHT=1 skips
// the check (not --copy), for hosts that are known good.
func preflightHosts(ctx context.Context, cfg *fanout.Config, h hostFlags, checkProgram bool) error {
	if os.Getenv("GOTRAIN_NO_PREFLIGHT") == "1" && !h.copy {
		return nil
	}
	gotrain := cfg.Gotrain
	if gotrain == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this gotrain binary: %w", err)
		}
		gotrain = self
	}
	plan := preflight.Plan{Gotrain: gotrain, Copy: h.copy, MasterPort: cfg.MasterPort, Logger: cfg.Logger}
	if checkProgram {
		plan.Program = cfg.Program
	}
	workers := cfg.Workers()
	for i, x := range cfg.Hosts {
		plan.Hosts = append(plan.Hosts, preflight.Host{Name: x.Name, Workers: workers[i]})
	}
	places, err := preflight.Prepare(ctx, cfg.SSH, plan)
	if err != nil {
		var pe *preflight.Error
		if errors.As(err, &pe) {
			// One line per problem, each naming its host.
			lines := "gotrain: pre-flight check failed; no worker started\n"
			for _, f := range pe.Failures {
				lines += "gotrain: " + f.Line + "\n"
			}
			_, _ = io.WriteString(cfg.Stderr, lines)
			return exitCodeError(exitFailure)
		}
		return err
	}
	cfg.GotrainOn, cfg.ProgramOn = map[string]string{}, map[string]string{}
	for i, p := range places {
		cfg.GotrainOn[cfg.Hosts[i].Name] = p.Gotrain
		switch {
		case !checkProgram:
			cfg.ProgramOn[cfg.Hosts[i].Name] = p.Gotrain // the workers are gotrain
		case p.Program != "":
			cfg.ProgramOn[cfg.Hosts[i].Name] = p.Program
		}
	}
	return nil
}
