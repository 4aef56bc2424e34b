package launch_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gotrain/gotrain/launch"
)

// TestRedirectsTeeFilter runs two workers that each write one line to
// stdout and one to stderr under each output control, and checks which
// lines reach the console and which files exist, with what in them.
func TestRedirectsTeeFilter(t *testing.T) {
	type place struct{ out, err bool } // on the console / in a file
	for _, tc := range []struct {
		name               string
		redirects, tee     launch.Streams
		filter             []int
		console, file      [2]place // per local rank
		noLogDirBesideFile bool
	}{
		{name: "log dir alone tees both",
			console: [2]place{{true, true}, {true, true}}, file: [2]place{{true, true}, {true, true}}},
		{name: "redirect all", redirects: launch.Streams{All: launch.StdAll},
			file: [2]place{{true, true}, {true, true}}},
		{name: "redirect stdout", redirects: launch.Streams{All: launch.StdOut},
			console: [2]place{{false, true}, {false, true}}, file: [2]place{{true, false}, {true, false}}},
		{name: "tee stderr", tee: launch.Streams{All: launch.StdErr},
			console: [2]place{{true, true}, {true, true}}, file: [2]place{{false, true}, {false, true}}},
		{name: "redirect rank 0 only", redirects: launch.Streams{ByLocalRank: map[int]launch.Std{0: launch.StdAll}},
			console: [2]place{{false, false}, {true, true}}, file: [2]place{{true, true}, {false, false}}},
		{name: "tee wins over redirect", redirects: launch.Streams{All: launch.StdAll}, tee: launch.Streams{All: launch.StdOut},
			console: [2]place{{true, false}, {true, false}}, file: [2]place{{true, true}, {true, true}}},
		{name: "filter rank 1", filter: []int{1},
			console: [2]place{{false, false}, {true, true}}, file: [2]place{{true, true}, {true, true}}},
		{name: "filter with tee", filter: []int{0}, tee: launch.Streams{All: launch.StdAll},
			console: [2]place{{true, true}, {false, false}}, file: [2]place{{true, true}, {true, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 2, "both", nil)
			j.cfg.LogDir = t.TempDir()
			j.cfg.Redirects, j.cfg.Tee, j.cfg.LocalRanksFilter = tc.redirects, tc.tee, tc.filter
			if code, err := j.run(t, context.Background()); code != 0 || err != nil {
				t.Fatalf("Run = %d, %v", code, err)
			}
			roots, _ := filepath.Glob(filepath.Join(j.cfg.LogDir, "*_*"))
			if len(roots) != 1 {
				t.Fatalf("log dir holds %v, want one run directory", roots)
			}
			for r := range 2 {
				rank := string(rune('0' + r))
				if got := strings.Contains(j.stdout.String(), "[rank"+rank+"]: out r="+rank+"\n"); got != tc.console[r].out {
					t.Errorf("rank %d stdout on the console: %v, want %v", r, got, tc.console[r].out)
				}
				if got := strings.Contains(j.stderr.String(), "[rank"+rank+"]: err r="+rank+"\n"); got != tc.console[r].err {
					t.Errorf("rank %d stderr on the console: %v, want %v", r, got, tc.console[r].err)
				}
				for _, f := range []struct {
					name, want string
					exists     bool
				}{{"stdout.log", "out r=" + rank + "\n", tc.file[r].out}, {"stderr.log", "err r=" + rank + "\n", tc.file[r].err}} {
					b, err := os.ReadFile(filepath.Join(roots[0], "attempt_0", rank, f.name))
					switch {
					case f.exists && (err != nil || string(b) != f.want):
						t.Errorf("rank %d %s: %q, %v; want %q", r, f.name, b, err, f.want)
					case !f.exists && !errors.Is(err, os.ErrNotExist):
						t.Errorf("rank %d %s exists (%v), want none", r, f.name, err)
					}
				}
			}
		})
	}
}

// TestOutputControlsRefused: redirects and tee without a log directory, and
// local ranks outside the node, are configuration errors.
func TestOutputControlsRefused(t *testing.T) {
	for name, set := range map[string]func(*launch.Config){
		"redirects without log dir": func(c *launch.Config) { c.Redirects = launch.Streams{All: launch.StdErr} },
		"tee without log dir":       func(c *launch.Config) { c.Tee = launch.Streams{ByLocalRank: map[int]launch.Std{1: launch.StdOut}} },
		"tee of rank 2 of 2": func(c *launch.Config) {
			c.LogDir = t.TempDir()
			c.Tee = launch.Streams{ByLocalRank: map[int]launch.Std{2: launch.StdOut}}
		},
		"redirects 4":        func(c *launch.Config) { c.LogDir = t.TempDir(); c.Redirects = launch.Streams{All: 4} },
		"filter rank -1":     func(c *launch.Config) { c.LocalRanksFilter = []int{-1} },
		"filter rank 2 of 2": func(c *launch.Config) { c.LocalRanksFilter = []int{0, 2} },
	} {
		j := newJob(t, 2, "both", nil)
		set(&j.cfg)
		code, err := launch.Run(context.Background(), j.cfg)
		if code != 1 || !errors.Is(err, launch.ErrConfig) {
			t.Errorf("%s: Run = %d, %v; want 1 and ErrConfig", name, code, err)
		}
	}
}

// TestFailureReport: the failed worker's rank, host, status and last
// stderr lines reach OnFailure once, even when its stderr was redirected
// away from the console.
func TestFailureReport(t *testing.T) {
	host, _ := os.Hostname()
	wantTail := []string{"e6", "e7", "e8", "e9", "e10", "e11", "e12", "e13", "e14", "e15"}
	for _, redirect := range []bool{false, true} {
		j := newJob(t, 2, "sleep", map[int]string{1: "noisy:5"})
		if redirect {
			j.cfg.LogDir = t.TempDir()
			j.cfg.Redirects = launch.Streams{All: launch.StdErr}
		}
		var got []launch.Failure
		j.cfg.OnFailure = func(f launch.Failure) { got = append(got, f) }
		code, err := j.run(t, context.Background())
		if code != 5 || err != nil {
			t.Fatalf("Run = %d, %v; want 5, nil", code, err)
		}
		if len(got) != 1 {
			t.Fatalf("OnFailure called %d times, want once", len(got))
		}
		f := got[0]
		if f.Rank != 1 || f.LocalRank != 1 || f.Host != host || f.ExitCode != 5 || f.Signal != 0 || f.PID <= 0 || !slices.Equal(f.Stderr, wantTail) {
			t.Fatalf("redirect %v: Failure %+v; want rank 1 on %s, exit 5, stderr %v", redirect, f, host, wantTail)
		}
		block := f.String()
		for _, want := range []string{"rank 1 (local rank 1) on " + host, "exit status 5", "last 10 lines of its stderr", "    e15\n"} {
			if !strings.Contains(block, want) {
				t.Errorf("report lacks %q:\n%s", want, block)
			}
		}
		if strings.Contains(j.log.String(), "level=ERROR") || strings.Contains(j.log.String(), "worker failed") {
			t.Errorf("with OnFailure set, the launcher still logged the failure:\n%s", j.log.String())
		}
	}
}

// TestFailureLogged: without OnFailure, the root cause is one Error record
// with the failed worker's fields; a signal is named.
func TestFailureLogged(t *testing.T) {
	j := newJob(t, 2, "sleep", map[int]string{0: "killself"})
	j.setEnv(envPeers + "=1")
	code, err := j.run(t, context.Background())
	if code != 128+int(syscall.SIGKILL) || err != nil {
		t.Fatalf("Run = %d, %v", code, err)
	}
	var errs []string
	for l := range strings.Lines(j.log.String()) {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			errs = append(errs, l)
		}
	}
	if len(errs) != 1 {
		t.Fatalf("%d warning or error records, want the one root cause:\n%s", len(errs), j.log.String())
	}
	for _, want := range []string{`msg="launch: job failed"`, "rank=0 ", "exit_code=137", "SIGKILL", "host=", "stderr_tail="} {
		if !strings.Contains(errs[0], want) {
			t.Errorf("root cause record lacks %q: %s", want, errs[0])
		}
	}
}
