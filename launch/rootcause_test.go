package launch_test

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/launch"
)

// TestRootCauseChoice: which failure RootCause picks, driven without
// processes.
func TestRootCauseChoice(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	peer := func(rank, blame, s int) launch.Failure {
		return launch.Failure{Rank: rank, PID: 100 + rank, ExitCode: 86, Secondary: true, Blames: true, BlameRank: blame, Time: at(s)}
	}
	for _, tc := range []struct {
		name      string
		fs        []launch.Failure
		rank      int
		cause     string
		blamedBy  []int
		wantFound bool
	}{
		{name: "none"},
		{"the earliest primary, after its fallout", []launch.Failure{
			peer(1, 0, 0), peer(2, 0, 1),
			{Rank: 3, PID: 103, ExitCode: 4, Time: at(3)},
			{Rank: 0, PID: 100, ExitCode: 1, Time: at(2)},
		}, 0, "exit status 1", []int{1, 2}, true},
		{"a signal", []launch.Failure{
			peer(0, 1, 0),
			{Rank: 1, PID: 101, ExitCode: 143, Signal: syscall.SIGTERM, Time: at(1)},
		}, 1, "terminated by SIGTERM", []int{0}, true},
		{"a stopped rank is primary", []launch.Failure{
			{Rank: 0, PID: 100, ExitCode: 86, Secondary: true, Blames: true, BlameRank: 1, Silence: 14 * time.Second, Time: at(0)},
			{Rank: 1, PID: 101, ExitCode: 137, Signal: syscall.SIGKILL, Secondary: true, Stopped: syscall.SIGSTOP, Time: at(1)},
		}, 1, "stopped (SIGSTOP) — no heartbeat for 14s", []int{0}, true},
		{"the chain of blame ends at a rank the launcher stopped", []launch.Failure{
			peer(2, 0, 0), peer(0, 1, 1),
			{Rank: 1, PID: 101, ExitCode: 143, Signal: syscall.SIGTERM, Secondary: true, Time: at(2)},
		}, 1, "went silent: the others failed waiting for it; the launcher ended it (terminated by SIGTERM)", []int{0}, true},
		{"a blamed rank elsewhere", []launch.Failure{
			{Rank: 0, PID: 100, ExitCode: 86, Secondary: true, Blames: true, BlameRank: 5, Silence: 2500 * time.Millisecond, Time: at(0)},
		}, 5, "went silent (no heartbeat for 2.5s)", []int{0}, true},
		{"a blame cycle stops", []launch.Failure{peer(0, 1, 0), peer(1, 0, 1)}, 0,
			"went silent: the others failed waiting for it; the launcher ended it (exit status 86)", []int{1}, true},
		{"a lost node", []launch.Failure{
			peer(0, 2, 0),
			{Rank: -1, ExitCode: 1, Reason: "node 1 (host h1, ranks 2-3) unreachable: gone", Time: at(4)},
		}, -1, "node 1 (host h1, ranks 2-3) unreachable: gone", nil, true},
	} {
		f, ok := launch.RootCause(tc.fs)
		if ok != tc.wantFound {
			t.Errorf("%s: found %v, want %v", tc.name, ok, tc.wantFound)
			continue
		}
		if !ok {
			continue
		}
		if f.Rank != tc.rank || f.Cause() != tc.cause || !slices.Equal(f.BlamedBy, tc.blamedBy) {
			t.Errorf("%s: rank %d: %q, blamed by %v; want rank %d: %q, blamed by %v",
				tc.name, f.Rank, f.Cause(), f.BlamedBy, tc.rank, tc.cause, tc.blamedBy)
		}
	}
}
