package main

import (
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/progress/console"
)

// defaultLogEvery is the period of the progress lines on a stderr that
// is not a terminal: --log-every's default, and the period of commands
// without the flag.
const defaultLogEvery = 10 * time.Second

// addLogEvery defines --log-every on f, for the commands that show
// progress.
func addLogEvery(f *pflag.FlagSet, v *string) {
	f.StringVar(v, "log-every", seconds(defaultLogEvery), "when stderr is not a terminal, print a progress line every this many seconds (or a duration like 30s)")
}

// seconds is d as the default of a flag that parseInterval reads: in
// seconds, as torchrun writes durations ("0.1").
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) }

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
