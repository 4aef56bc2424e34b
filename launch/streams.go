package launch

import (
	"fmt"
	"io"
	"slices"
)

// Std selects a worker's standard streams, as torchrun's Std does for
// --redirects and --tee.
type Std int

// The streams a Std selects.
const (
	StdNone Std = 0 // neither
	StdOut  Std = 1 // stdout
	StdErr  Std = 2 // stderr
	StdAll  Std = 3 // both
)

// Streams is a Std for each local rank: ByLocalRank's entry for the ranks
// it names, All for the others. torchrun's "3" is Streams{All: StdAll},
// its "0:1,1:2" is Streams{ByLocalRank: map[int]Std{0: StdOut, 1: StdErr}}.
type Streams struct {
	All         Std
	ByLocalRank map[int]Std
}

// For is the Std of local rank localRank.
func (s Streams) For(localRank int) Std {
	if std, ok := s.ByLocalRank[localRank]; ok {
		return std
	}
	return s.All
}

// isZero reports whether s selects no stream of any rank.
func (s Streams) isZero() bool {
	if s.All != StdNone {
		return false
	}
	for _, std := range s.ByLocalRank {
		if std != StdNone {
			return false
		}
	}
	return true
}

// check refuses Std values outside [StdNone, StdAll] and local ranks
// outside [0, nproc).
func (s Streams) check(name string, nproc int) error {
	if s.All < StdNone || s.All > StdAll {
		return fmt.Errorf("%w: %s %d: want 0 (none), 1 (stdout), 2 (stderr) or 3 (both)", ErrConfig, name, s.All)
	}
	for r, std := range s.ByLocalRank {
		if r < 0 || r >= nproc {
			return fmt.Errorf("%w: %s: local rank %d out of range [0, %d)", ErrConfig, name, r, nproc)
		}
		if std < StdNone || std > StdAll {
			return fmt.Errorf("%w: %s %d:%d: want 0 (none), 1 (stdout), 2 (stderr) or 3 (both)", ErrConfig, name, r, std)
		}
	}
	return nil
}

// checkOutput validates the output controls of c (after withDefaults).
func (c Config) checkOutput() error {
	if err := c.Redirects.check("redirects", c.NProcPerNode); err != nil {
		return err
	}
	if err := c.Tee.check("tee", c.NProcPerNode); err != nil {
		return err
	}
	if c.LogDir == "" && !(c.Redirects.isZero() && c.Tee.isZero()) {
		return fmt.Errorf("%w: redirects and tee write to files under the log directory: set LogDir (--log-dir)", ErrConfig)
	}
	for _, r := range c.LocalRanksFilter {
		if r < 0 || r >= c.NProcPerNode {
			return fmt.Errorf("%w: local-ranks-filter: local rank %d out of range [0, %d)", ErrConfig, r, c.NProcPerNode)
		}
	}
	return nil
}

// streamRoute is where one worker's stdout ([0]) and stderr ([1]) go.
type streamRoute struct {
	console [2]bool // shown on the console
	file    [2]bool // written to the worker's file under LogDir
}

// route decides where the streams of local rank localRank go: torchrun's
// rules, in which a redirected stream goes to its file only, a teed one to
// its file and the console, and the console shows only the ranks of
// LocalRanksFilter. With neither Redirects nor Tee set, LogDir receives
// both streams besides the console.
func (c Config) route(localRank int) streamRoute {
	shown := len(c.LocalRanksFilter) == 0 || slices.Contains(c.LocalRanksFilter, localRank)
	rt := streamRoute{console: [2]bool{shown, shown}}
	if c.LogDir == "" {
		return rt
	}
	if c.Redirects.isZero() && c.Tee.isZero() {
		rt.file = [2]bool{true, true}
		return rt
	}
	redirect, tee := c.Redirects.For(localRank), c.Tee.For(localRank)
	for i, bit := range [2]Std{StdOut, StdErr} {
		rt.file[i] = (redirect|tee)&bit != 0
		rt.console[i] = shown && (redirect&bit == 0 || tee&bit != 0)
	}
	return rt
}

// consoles returns the console writers of the route: stdout and stderr,
// or io.Discard for a stream not shown.
func (rt streamRoute) consoles(stdout, stderr io.Writer) [2]io.Writer {
	out := [2]io.Writer{stdout, stderr}
	for i, shown := range rt.console {
		if !shown {
			out[i] = io.Discard
		}
	}
	return out
}
