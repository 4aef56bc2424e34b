package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/launch/observe"
)

// dashboardState fetches the dashboard's state.
func dashboardState(t *testing.T, base string) observe.State {
	t.Helper()
	resp, err := http.Get(base + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st observe.State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitDumps waits until dir holds a dump of each of ranks taken for
// reason (a prefix).
func waitDumps(t *testing.T, dir, reason string, ranks ...int) map[int]distributed.FlightDump {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[int]distributed.FlightDump{}
		for _, r := range ranks {
			b, err := os.ReadFile(filepath.Join(dir, "flight_rank"+string(rune('0'+r))+".json"))
			var d distributed.FlightDump
			if err == nil && json.Unmarshal(b, &d) == nil && strings.HasPrefix(d.Reason, reason) {
				got[r] = d
			}
		}
		if len(got) == len(ranks) {
			return got
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(dir)
			t.Fatalf("no %q dumps of ranks %v in %s after 30 s (have %v)", reason, ranks, dir, entries)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFlightRecorderNamesTheStoppedRank: SIGUSR1 to the launcher has
// both workers dump their last collectives; then, with rank 1 stopped
// (SIGSTOP), rank 0's next allreduce times out, rank 0 dumps, and
// `gotrain trace` names rank 1 as the one that never entered it.
func TestFlightRecorderNamesTheStoppedRank(t *testing.T) {
	dir := t.TempDir()
	g := startWatched(t, 120*time.Second, []string{"GOTRAIN_TIMEOUT=3s"}, "train", "mnist", "--nproc-per-node", "2",
		"--max-steps", "100000", "--flight-dir", dir, "--dashboard", "127.0.0.1:0")
	base := g.waitLine(servingRe("dashboard"), 30*time.Second)[1]
	var pids [2]int
	for deadline := time.Now().Add(60 * time.Second); ; {
		st := dashboardState(t, base)
		n := 0
		for _, w := range st.Workers {
			if w.PID > 0 && w.Last != nil && w.Last.Step >= 3 && w.Rank < 2 {
				pids[w.Rank] = w.PID
				n++
			}
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers did not report 3 steps within 60 s: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := syscall.Kill(g.pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	dumps := waitDumps(t, dir, "SIGUSR1", 0, 1)
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
	select {
	case <-g.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the job did not fail within 60 s of rank 1's SIGSTOP; output:\n%s", g.all.String())
	}
	if g.code == 0 {
		t.Fatalf("the job succeeded with rank 1 stopped; output:\n%s", g.all.String())
	}
	waitDumps(t, dir, "operation failed", 0)
	if _, err := os.Stat(filepath.Join(dir, "flight_rank1.json")); err == nil {
		t.Fatal("the stopped rank 1 dumped")
	}
	all, stdout, code := runGotrain(t, 30*time.Second, "trace", dir)
	if code != 0 {
		t.Fatalf("gotrain trace: exit %d:\n%s", code, all)
	}
	t.Logf("gotrain trace %s:\n%s", dir, stdout)
	for _, want := range []string{"none from rank 1", "rank 1 never entered allreduce #", "rank 0 waited 3"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("gotrain trace output lacks %q:\n%s", want, stdout)
		}
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
