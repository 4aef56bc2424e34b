package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/launch/observe"
)

// dashboardState fetches the dashboard's state.
func dashboardState(base string) (observe.State, error) {
	var st observe.State
	resp, err := http.Get(base + "/api/state")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// waitDumps waits up to limit until dir holds a dump of each of ranks
// taken for reason (a prefix).
func waitDumps(t *testing.T, dir, reason string, limit time.Duration, ranks ...int) map[int]distributed.FlightDump {
	t.Helper()
	got := map[int]distributed.FlightDump{}
	all := func() bool {
		for _, r := range ranks {
			b, err := os.ReadFile(filepath.Join(dir, "flight_rank"+strconv.Itoa(r)+".json"))
			var d distributed.FlightDump
			if err == nil && json.Unmarshal(b, &d) == nil && strings.HasPrefix(d.Reason, reason) {
				got[r] = d
			}
		}
		return len(got) == len(ranks)
	}
	if !waitDir(t, dir, limit, all) {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("no %q dumps of ranks %v in %s after %v (have %v)", reason, ranks, dir, limit, entries)
	}
	return got
}

// TestFlightRecorderNamesTheStoppedRank: SIGUSR1 to the launcher has
// both workers dump their last collectives; then, with rank 1 stopped
// (SIGSTOP), rank 0's next allreduce times out, rank 0 dumps, and
// `gotrain trace` names rank 1 as the one that never entered it.
//
// The operation timeout is the bound under test, and it bounds every
// collective of the run, the first ones included: it is set well above
// any stall that a loaded machine causes before the stop (a rank slow to
// start, descheduled for seconds), which would otherwise fail the job
// before the test stops anyone. The peers' silence bound is set far
// above it, so that the timeout, not the stopped rank's silence, is what
// fails rank 0.
func TestFlightRecorderNamesTheStoppedRank(t *testing.T) {
	const opTimeout = 10 * time.Second
	dir := t.TempDir()
	g := startWatched(t, opTimeout+120*time.Second, []string{"GOTRAIN_TIMEOUT=" + opTimeout.String(), "GOTRAIN_HEARTBEAT_TIMEOUT=10m"},
		"train", "mnist", "--nproc-per-node", "2", "--epochs", "1000", // on until stopped
		"--flight-dir", dir, "--dashboard", "127.0.0.1:0")
	base := g.waitLine(servingRe("dashboard"), 30*time.Second)[1]
	var pids [2]int
	var st observe.State
	// The dashboard announces nothing: it is polled.
	training := poll(60*time.Second, 100*time.Millisecond, func() bool {
		var err error
		if st, err = dashboardState(base); err != nil {
			g.fatal("dashboard: %v", err)
		}
		n := 0
		for _, w := range st.Workers {
			if w.PID > 0 && w.Last != nil && w.Last.Step >= 3 && w.Rank < 2 {
				pids[w.Rank] = w.PID
				n++
			}
		}
		return n == 2
	})
	if !training {
		t.Fatalf("workers did not report 3 steps within 60 s: %+v", st)
	}

	if err := syscall.Kill(g.pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	dumps := waitDumps(t, dir, "SIGUSR1", 30*time.Second, 0, 1)
	for r, d := range dumps {
		if d.PID != pids[r] || d.World != 2 || len(d.Records) == 0 {
			t.Fatalf("rank %d's SIGUSR1 dump: pid %d (want %d), world %d, %d records", r, d.PID, pids[r], d.World, len(d.Records))
		}
	}
	for _, r := range []string{"0", "1"} {
		os.Remove(filepath.Join(dir, "flight_rank"+r+".json"))
	}

	if err := syscall.Kill(pids[1], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pids[1], syscall.SIGKILL) }) // our grandchild, if the launcher left it
	// Rank 0 fails at the timeout; the launcher then stops the stopped
	// rank 1 (SIGTERM, SIGKILL after its grace).
	select {
	case <-g.done:
	case <-time.After(opTimeout + 60*time.Second):
		t.Fatalf("the job did not fail within %v of rank 1's SIGSTOP; output:\n%s", opTimeout+60*time.Second, g.all.String())
	}
	if g.code == 0 {
		t.Fatalf("the job succeeded with rank 1 stopped; output:\n%s", g.all.String())
	}
	waitDumps(t, dir, "operation failed", 30*time.Second, 0)
	if _, err := os.Stat(filepath.Join(dir, "flight_rank1.json")); err == nil {
		t.Fatal("the stopped rank 1 dumped")
	}
	all, stdout, code := runGotrain(t, 30*time.Second, "trace", dir)
	if code != 0 {
		t.Fatalf("gotrain trace: exit %d:\n%s", code, all)
	}
	t.Logf("gotrain trace %s:\n%s", dir, stdout)
	for _, want := range []string{"none from rank 1", "rank 1 never entered allreduce #"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("gotrain trace output lacks %q:\n%s", want, stdout)
		}
	}
	// Rank 0 waited out the timeout: not less, and not much more (the
	// trace rounds to 100 ms).
	m := regexp.MustCompile(`rank 0 waited (\S+)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("gotrain trace output does not say how long rank 0 waited:\n%s", stdout)
	}
	waited, err := time.ParseDuration(strings.TrimRight(m[1], ",;:)"))
	if err != nil || waited < opTimeout-100*time.Millisecond || waited > 3*opTimeout {
		t.Errorf("rank 0 waited %s (%v), want the %v operation timeout:\n%s", m[1], err, opTimeout, stdout)
	}
}

// TestTraceCommandErrors are one line naming the problem.
func TestTraceCommandErrors(t *testing.T) {
	dir := t.TempDir()
	all, _, code := runGotrain(t, 30*time.Second, "trace", dir)
	if code == 0 || !strings.Contains(all, "no flight_rank*.json dumps in "+dir) {
		t.Fatalf("empty dir: exit %d: %s", code, all)
	}
	all, _, code = runGotrain(t, 30*time.Second, "trace")
	if code != exitUsage || !strings.Contains(all, "want one argument") {
		t.Fatalf("no dir: exit %d: %s", code, all)
	}
}
