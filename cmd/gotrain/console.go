package main

import (
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/progress/console"
)

// addLogEvery defines --log-every on f, for the commands that show
// progress.
func addLogEvery(f *pflag.FlagSet, v *string) {
	f.StringVar(v, "log-every", "10", "when stderr is not a terminal, print a progress line every this many seconds (or a duration like 30s)")
}

// logEvery parses --log-every.
func logEvery(s string) (time.Duration, error) {
	d, err := parseInterval(s)
	if err != nil {
		return 0, badFlag("log-every", s, "must be a positive number of seconds or a duration like 30s")
	}
	return d, nil
}

// attachConsole makes the launcher's console own the terminal: the
// workers' lines and the launcher's records print through it, above the
// display it draws from the workers' progress events, on stderr. The
// caller closes it once launch.Run returns.
func attachConsole(cfg *launch.Config, every time.Duration) *console.Console {
	c := console.New(console.Options{Out: os.Stderr, LogEvery: every, Ranks: cfg.NProcPerNode})
	cfg.Stdout = c.LineWriter(os.Stdout)
	cfg.Stderr = c.Writer()
	cfg.Events = c.Event
	return c
}
