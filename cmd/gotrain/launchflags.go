package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/logging"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/fanout"
)

// outputFlags are the launcher's output controls, torchrun's --tee,
// --redirects and --local-ranks-filter, and the log format, which `run`
// and `train mnist` share.
type outputFlags struct {
	logFormat   string
	tee         string
	redirects   string
	ranksFilter string
}

// register defines the flags on f.
func (o *outputFlags) register(f *pflag.FlagSet) {
	f.StringVar(&o.logFormat, "log-format", "", "log records as "+logging.Formats+", for the launcher and the workers (default $"+logging.EnvFormat+" or text)")
	f.StringVar(&o.tee, "tee", "0", "also write these worker streams to files under --log-dir: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank as 0:3,1:2")
	f.StringVar(&o.redirects, "redirects", "0", "write these worker streams only to files under --log-dir, not the console: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank as 0:3,1:2")
	f.StringVar(&o.ranksFilter, "local-ranks-filter", "", "show only these local ranks' output on the console, e.g. 0 or 0,1 (log files keep all)")
}

// format is the log format the flags choose.
func (o outputFlags) format() string {
	if o.logFormat != "" {
		return o.logFormat
	}
	if env := os.Getenv(logging.EnvFormat); logging.CheckFormat(env) == nil && env != "" {
		return env
	}
	return logging.Text
}

// apply checks the flags and sets cfg's output fields; cfg.NProcPerNode
// and cfg.LogDir must be set already.
func (o outputFlags) apply(f *pflag.FlagSet, cfg *launch.Config) error {
	if err := o.checkFormat(); err != nil {
		return err
	}
	var err error
	for _, sf := range []struct {
		name, value string
		dst         *launch.Streams
	}{{"tee", o.tee, &cfg.Tee}, {"redirects", o.redirects, &cfg.Redirects}} {
		if *sf.dst, err = parseStreams(sf.value, cfg.NProcPerNode); err != nil {
			return badFlag(sf.name, sf.value, err.Error())
		}
		if (sf.dst.All != launch.StdNone || len(sf.dst.ByLocalRank) > 0) && cfg.LogDir == "" {
			return badFlag(sf.name, sf.value, "needs --log-dir, where the streams are written")
		}
	}
	if f.Changed("local-ranks-filter") {
		if cfg.LocalRanksFilter, err = parseLocalRanks(o.ranksFilter, cfg.NProcPerNode); err != nil {
			return badFlag("local-ranks-filter", o.ranksFilter, err.Error())
		}
	}
	return nil
}

// checkFormat refuses an unknown --log-format.
func (o outputFlags) checkFormat() error {
	if err := logging.CheckFormat(o.logFormat); err != nil {
		return badFlag("log-format", o.logFormat, "must be "+logging.Formats)
	}
	return nil
}

// setupLauncherLog makes the launching process log in the chosen format
// to stderr, serialized with the workers' lines that cfg.Stderr receives,
// gives the workers the format, and reports a failure as the format
// wants: a block of lines for text, one record for JSON.
func (o outputFlags) setupLauncherLog(cfg *launch.Config) {
	format := o.format()
	stderr := &syncWriter{w: os.Stderr}
	if cfg.Stderr != nil {
		stderr.w = cfg.Stderr
	}
	cfg.Stderr = stderr
	log := logging.New(stderr, format)
	slog.SetDefault(log)
	cfg.Logger = log
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	cfg.Env = append(cfg.Env, logging.EnvFormat+"="+format)
	if format == logging.Text {
		cfg.OnFailure = launch.WriteFailure(stderr)
	}
}

// syncWriter serializes writes to w: the launcher's records and the
// workers' lines share stderr.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// timeoutFlag is --timeout, the bound on each collective operation, which
// `run` and `train mnist` give their workers as GOTRAIN_TIMEOUT (read by
// distributed.Init).
type timeoutFlag struct{ d time.Duration }

// register defines the flag on f.
func (t *timeoutFlag) register(f *pflag.FlagSet) {
	f.DurationVar(&t.d, "timeout", 0, fmt.Sprintf("bound on each collective operation, e.g. 10m, after which a live but stuck peer fails the job (default $GOTRAIN_TIMEOUT or %gm)", distributed.DefaultTimeout.Minutes()))
}

// check refuses a timeout that is given but not positive.
func (t timeoutFlag) check(f *pflag.FlagSet) error {
	if f.Changed("timeout") && t.d <= 0 {
		return badFlag("timeout", t.d.String(), "must be a positive duration")
	}
	return nil
}

// export sets GOTRAIN_TIMEOUT for this process and the workers it starts,
// which inherit its environment.
func (t timeoutFlag) export() {
	if t.d > 0 {
		os.Setenv("GOTRAIN_TIMEOUT", t.d.String())
	}
}

// backoffFlag is --restart-backoff, the wait before the first restart of
// --max-restarts, which doubles for each next one up to
// launch.DefaultMaxRestartBackoff.
type backoffFlag struct{ d time.Duration }

// register defines the flag on f.
func (b *backoffFlag) register(f *pflag.FlagSet) {
	f.DurationVar(&b.d, "restart-backoff", launch.DefaultRestartBackoff, fmt.Sprintf("with --max-restarts: wait this long before the first restart, twice as long before each next, at most %v (0 restarts at once)", launch.DefaultMaxRestartBackoff))
}

// check refuses a negative wait.
func (b backoffFlag) check() error {
	if b.d < 0 {
		return badFlag("restart-backoff", b.d.String(), "must be a duration of at least 0")
	}
	return nil
}

// apply sets cfg's backoff.
func (b backoffFlag) apply(cfg *launch.Config) { cfg.RestartBackoff = b.base() }

// applyHosts sets the backoff of a job on several hosts.
func (b backoffFlag) applyHosts(cfg *fanout.Config) { cfg.RestartBackoff = b.base() }

// base is the first wait as the launchers' configs take it, whose 0 is
// the default.
func (b backoffFlag) base() time.Duration {
	if b.d == 0 {
		return -1
	}
	return b.d
}
