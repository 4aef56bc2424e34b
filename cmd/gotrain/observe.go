package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/fanout"
	"github.com/gotrain/gotrain/launch/observe"
	"github.com/gotrain/gotrain/progress/console"
)

// observeFlags are the flags that watch a run from its launcher: the
// metrics file and the timeline (which the launcher writes from its
// workers' reports), Prometheus, the dashboard and the flight recorder's
// directory.
type observeFlags struct {
	metrics, trace string
	metricsEvery   int
	metricsAddr    string
	dashboard      string
	linger         string // --dashboard-linger, parsed by check into lingerFor
	lingerFor      time.Duration
	flightDir      string
}

// registerLauncher defines the launcher-side flags on f.
func (o *observeFlags) registerLauncher(f *pflag.FlagSet) {
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics of every rank at http://ADDR/metrics (e.g. :9090)")
	f.StringVar(&o.dashboard, "dashboard", "", "serve a live dashboard of the run at http://ADDR/ (e.g. :8080)")
	f.StringVar(&o.linger, "dashboard-linger", "", "keep serving the dashboard's final state (finished or failed) this long after the job ends, e.g. 10m; Ctrl-C ends it sooner (default 60s when stderr is a terminal, else 0)")
	f.StringVar(&o.flightDir, "flight-dir", os.Getenv("GOTRAIN_FLIGHT_DIR"), "directory where ranks dump their last collectives on a failed operation or SIGUSR1 to the launcher (read it with gotrain trace DIR)")
}

// registerJob defines the flags of a demo job that records metrics.
func (o *observeFlags) registerJob(f *pflag.FlagSet) {
	f.StringVar(&o.metrics, "metrics", "", "write a JSON line per step per rank (loss, lr, samples/s, the step's phases, bytes per peer) to this file")
	f.IntVar(&o.metricsEvery, "metrics-every", 1, "one metrics row per N steps (the mean of the N)")
	f.StringVar(&o.trace, "trace", "", "write the run's timeline (Chrome trace-event JSON: chrome://tracing, Perfetto) to this file")
	o.registerLauncher(f)
}

// served reports whether the flags ask the launcher to serve something
// (the dashboard, Prometheus): a demo job of one worker then runs it
// under the launcher instead of in this process.
func (o *observeFlags) served() bool { return o.metricsAddr != "" || o.dashboard != "" }

// defaultLinger is how long an interactive launcher serves a dashboard's
// final state: long enough to look at it.
const defaultLinger = 60 * time.Second

// check refuses bad values. For a demo job (job), n is its number of
// local workers: one trains in-process unless the launcher serves
// something, and progress is how workers report.
func (o *observeFlags) check(f *pflag.FlagSet, job bool, n int, progress bool) error {
	for _, name := range []string{"metrics", "trace"} {
		if f.Lookup(name) != nil && f.Changed(name) {
			if err := checkSavePath(name, f.Lookup(name).Value.String()); err != nil {
				return err
			}
		}
	}
	if job && o.metricsEvery < 1 {
		return badFlag("metrics-every", o.metricsEvery, "must be at least 1")
	}
	for _, name := range []string{"metrics-addr", "dashboard"} {
		v := f.Lookup(name).Value.String()
		if v == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(v); err != nil {
			return badFlag(name, v, "want HOST:PORT or :PORT")
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return badFlag(name, v, "the port must be a number in [0, 65535]")
		}
	}
	if job && (n > 1 || o.served()) && !progress {
		for _, name := range []string{"metrics", "trace", "metrics-addr", "dashboard"} {
			if f.Changed(name) {
				return flagNeeds(name, "needs --progress with --nproc-per-node > 1, --dashboard or --metrics-addr (workers report through it)")
			}
		}
	}
	if f.Changed("dashboard-linger") {
		d, err := time.ParseDuration(o.linger)
		switch {
		case err != nil || d < 0:
			return badFlag("dashboard-linger", o.linger, "want a duration like 60s or 10m (0 closes the dashboard with the job)")
		case o.dashboard == "":
			return flagNeeds("dashboard-linger", "needs --dashboard, the dashboard to keep serving")
		}
		o.lingerFor = d
	} else if o.dashboard != "" && console.IsTerminal(os.Stderr) {
		o.lingerFor = defaultLinger
	}
	if o.flightDir != "" {
		return checkWritableDir("flight-dir", o.flightDir)
	}
	return nil
}

// jobConfig is what the job itself records. A job that trains in this
// process dumps its flight recorder to --flight-dir, which the process
// group reads from the environment.
func (o *observeFlags) jobConfig() (metrics, trace string, every int) {
	if o.flightDir != "" {
		_ = os.Setenv("GOTRAIN_FLIGHT_DIR", o.flightDir) // a valid name and value: cannot fail
	}
	return o.metrics, o.trace, o.metricsEvery
}

// observer is a launch's hub, and what to tell it as the job ends.
type observer struct {
	hub    *observe.Hub
	linger time.Duration // how long the dashboard's final state stays served
	log    *slog.Logger
}

// attach makes the hub the flags ask for and plugs it into cfg: the
// workers' events reach it before the console, and the workers learn what
// to report. The run id is fixed here, so that the labels name the run the
// workers join.
func (o *observeFlags) attach(cfg *launch.Config) (*observer, error) {
	if cfg.RunID == "" && cfg.Standalone {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		cfg.RunID = hex.EncodeToString(b)
	}
	runID := cfg.RunID
	if runID == "" {
		runID = "none"
	}
	hub, err := observe.New(observe.Options{RunID: runID, Node: strconv.Itoa(cfg.NodeRank), Ranks: cfg.NProcPerNode * max(cfg.NNodes, 1),
		MetricsFile: o.metrics, TraceFile: o.trace, MetricsAddr: o.metricsAddr, DashboardAddr: o.dashboard,
		FlightDir: o.flightDir, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	cfg.Events = hub.Wrap(cfg.Events)
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	cfg.Env = append(cfg.Env, hub.Env()...)
	return &observer{hub: hub, linger: o.lingerFor, log: cfg.Logger}, nil
}

// any reports whether the flags ask the launcher to observe the job.
func (o *observeFlags) any() bool {
	return o.metrics != "" || o.trace != "" || o.metricsAddr != "" || o.dashboard != ""
}

// attachHosts makes the hub for a job fanned out to several hosts (nil
// if the flags ask for none): every rank's rows and spans come back over
// ssh and are merged here, labelled with their node. It returns the
// variables the workers need. --flight-dir is where each worker dumps on
// its own host; SIGUSR1 is not forwarded to other machines.
func (o *observeFlags) attachHosts(cfg *fanout.Config, log *slog.Logger) (*observer, []string, error) {
	var env []string
	if o.flightDir != "" {
		env = append(env, "GOTRAIN_FLIGHT_DIR="+o.flightDir)
	}
	if !o.any() {
		return nil, env, nil
	}
	if cfg.RunID == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		cfg.RunID = hex.EncodeToString(b)
	}
	var firsts []int // each node's first global rank
	world := 0
	for _, n := range cfg.Workers() {
		firsts = append(firsts, world)
		world += n
	}
	nodeOf := func(rank int) string {
		i, found := slices.BinarySearch(firsts, rank)
		if !found {
			i--
		}
		return strconv.Itoa(i)
	}
	hub, err := observe.New(observe.Options{RunID: cfg.RunID, NodeOf: nodeOf, Ranks: world,
		MetricsFile: o.metrics, TraceFile: o.trace, MetricsAddr: o.metricsAddr, DashboardAddr: o.dashboard, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	cfg.Events = hub.Wrap(cfg.Events)
	return &observer{hub: hub, linger: o.lingerFor, log: log}, append(env, hub.Env()...), nil
}

// done records how the job ended and closes the hub (after the
// dashboard's linger), reporting an unwritten file on stderr (the job's
// own outcome is what the caller returns).
func (o *observer) done(code int, err error) {
	o.finish(code, err)
	o.close()
}

// finish marks the job finished or failed on the dashboard, which then
// shows its final state, and says how long it stays served.
func (o *observer) finish(code int, err error) {
	state := observe.StateFinished
	if err != nil || code != 0 {
		state = observe.StateFailed
	}
	o.hub.SetState(state)
	// A job the user stopped (Ctrl-C, SIGTERM) is not kept on show: that
	// signal was meant for the whole launcher.
	if errors.Is(err, launch.ErrInterrupted) {
		o.linger = 0
	}
	if addr := o.hub.Addr("dashboard"); addr != "" && o.linger > 0 {
		o.logger().Info(fmt.Sprintf("dashboard: the job %s; its final state stays at http://%s/ for %v (--dashboard-linger; Ctrl-C ends it now)",
			state, addr, o.linger))
	}
}

// close waits out the dashboard's linger, or a SIGINT or SIGTERM that
// ends it, then closes the hub.
func (o *observer) close() {
	if o.hub.Addr("dashboard") != "" && o.linger > 0 {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		t := time.NewTimer(o.linger)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		stop()
	}
	if cerr := o.hub.Close(); cerr != nil {
		fmt.Fprintln(os.Stderr, "gotrain:", cerr)
	}
}

func (o *observer) logger() *slog.Logger {
	if o.log != nil {
		return o.log
	}
	return slog.Default()
}
