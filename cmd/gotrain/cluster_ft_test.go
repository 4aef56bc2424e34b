package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// ftScript is a worker of the fault-tolerant cluster tests: it leaves
// its pid in dir/pid-$RANK and waits for dir/finish, then exits 0. The
// hosts share the file system (only the network is theirs).
func ftScript(dir string) string {
	return fmt.Sprintf(`echo $$ > %[1]s/pid-$RANK.tmp && mv %[1]s/pid-$RANK.tmp %[1]s/pid-$RANK
i=0; while [ ! -e %[1]s/finish ]; do i=$((i+1)); [ $i -gt 12000 ] && exit 7; sleep 0.01; done
exit 0`, dir)
}

// startFTOnHosts runs `gotrain run --hosts` with --ft on c's 2 hosts × 2
// workers of ftScript, and returns the workers' pids by rank.
func startFTOnHosts(t *testing.T, c *clustertest.Cluster, dir string) (*output, <-chan int, [4]int) {
	t.Helper()
	args := append([]string{"run", "--hosts", hostList(c, 2)}, c.SSHFlags()...)
	args = append(args, "--ft", "--min-replicas", "2", "--max-restarts", "0", "sh", "-c", ftScript(dir))
	_, out, code := startGotrain(t, context.Background(), nil, args...)
	var pids [4]int
	for r := range 4 {
		path := filepath.Join(dir, "pid-"+strconv.Itoa(r))
		waitFile(t, path, 40*time.Second, out)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if pids[r], err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Fatalf("pid file of rank %d: %q", r, b)
		}
	}
	return out, code, pids
}

// finishFT has host 0's workers finish once the launcher has gone on
// without host 1, and checks that they were never restarted and that
// the job succeeds.
func finishFT(t *testing.T, dir string, out *output, code <-chan int, pids [4]int, since time.Time) {
	t.Helper()
	if !out.waitFor(40*time.Second, func(s string) bool { return strings.Contains(s, "left the fault-tolerant job; the other nodes go on") }) {
		t.Fatal("the launcher did not go on without host 1")
	}
	t.Logf("the launcher went on without host 1 %v after the failure", time.Since(since).Round(time.Millisecond))
	for _, r := range []int{0, 1} {
		if err := syscall.Kill(pids[r], 0); err != nil {
			t.Errorf("rank %d (pid %d) on host 0 did not survive host 1's failure: %v", r, pids[r], err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "finish"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-code:
		if got != 0 {
			t.Errorf("launcher exit code %d, want 0: host 0's workers finished", got)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("launcher still running 40 s after host 0's workers were told to finish")
	}
}

// TestClusterFTHostWorkersKilled: both workers of host 1 are SIGKILLed
// (no restart left): host 0's workers run on, and the job succeeds.
func TestClusterFTHostWorkersKilled(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	dir := t.TempDir()
	out, code, pids := startFTOnHosts(t, c, dir)
	killed := time.Now()
	for _, r := range []int{2, 3} {
		if err := syscall.Kill(pids[r], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	finishFT(t, dir, out, code, pids, killed)
}

// TestClusterFTLinkDown: host 1's link goes down: the launcher loses its
// agent, and host 0's workers run on; the job succeeds.
func TestClusterFTLinkDown(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	dir := t.TempDir()
	out, code, pids := startFTOnHosts(t, c, dir)
	cut := time.Now()
	c.Hosts[1].LinkDown(t)
	finishFT(t, dir, out, code, pids, cut)
	c.Hosts[1].LinkUp(t)
}

// startFTTraining runs `gotrain train mnist --hosts` with --ft on c's 2
// hosts × 1 worker, logging each committed step, and returns the
// launcher's output, its exit code and the workers' pids by host.
func startFTTraining(t *testing.T, c *clustertest.Cluster, maxRestarts int) (*output, <-chan int, [2]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	env := []string{harness.EnvFTTrace + "=1", "GOTRAIN_HEARTBEAT_TIMEOUT=3s"}
	args := mnistOnHosts(c, 1, "--ft", "--epochs", "1000", "--max-steps", "200", "--batch-size", "32",
		"--max-restarts", strconv.Itoa(maxRestarts), "--restart-backoff", "0")
	_, out, code := startGotrain(t, ctx, env, args...)
	if !out.waitFor(time.Minute, func(s string) bool { return len(commits(s)[0]) >= 10 }) {
		t.Fatal("no 10 steps committed within a minute")
	}
	var pids [2]int
	for i, h := range c.Hosts {
		ws := workers(t, h)
		if len(ws) != 1 {
			t.Fatalf("%s runs %d workers, want 1: %v", h.Name, len(ws), ws)
		}
		pids[i] = ws[0].PID
	}
	return out, code, pids
}

// ftSummary waits for the job's end and returns rank 0's summary.
func ftSummary(t *testing.T, out *output, code <-chan int) map[string]string {
	t.Helper()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("launcher exit code %d, want 0", c)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the job did not end within 2 minutes")
	}
	var line string
	for l := range strings.Lines(out.String()) {
		// The launcher of several hosts prints rank 0's summary last, bare.
		if strings.HasPrefix(strings.TrimPrefix(l, "[rank0]: "), "model=") {
			line = l
		}
	}
	if line == "" {
		t.Fatal("no summary line")
	}
	return summary(t, line)
}

// TestClusterFTTrainHostKilled: host 1's worker is SIGKILLed while the
// job trains; host 0's worker trains on, host 1's agent restarts its
// worker, which heals (its weights equal host 0's at each step it
// commits), and the job ends with a trained model.
func TestClusterFTTrainHostKilled(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	out, code, pids := startFTTraining(t, c, 1)
	before := len(out.String())
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	kv := ftSummary(t, out, code)
	if err := syscall.Kill(pids[0], 0); err == nil {
		t.Errorf("host 0's worker (pid %d) still runs after the job ended", pids[0])
	}
	cs := commits(out.String())
	ref := map[int]string{}
	for _, c := range cs[0] {
		ref[c.step] = c.hash
	}
	healed := 0
	for _, c := range cs[1] {
		if c.at > before {
			if ref[c.step] != c.hash {
				t.Fatalf("host 1's restarted worker at step %d has weights %s, host 0's %q", c.step, c.hash, ref[c.step])
			}
			healed++
		}
	}
	if healed == 0 {
		t.Error("host 1's restarted worker committed no step")
	}
	if last := cs[0][len(cs[0])-1]; last.step != 200 || kv["failures_survived"] != "1" || num(t, kv, "steps_lost") > 1 {
		t.Errorf("host 0's last step %d, summary %v: want 200, failures_survived=1, steps_lost<=1", last.step, kv)
	}
}

// TestClusterFTTrainLinkDown: host 1's link goes down while the job
// trains: its worker leaves the quorum and host 0's trains on to the end.
func TestClusterFTTrainLinkDown(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	out, code, _ := startFTTraining(t, c, 0)
	c.Hosts[1].LinkDown(t)
	kv := ftSummary(t, out, code)
	c.Hosts[1].LinkUp(t)
	cs := commits(out.String())
	if last := cs[0][len(cs[0])-1]; last.step != 200 || kv["failures_survived"] != "1" || num(t, kv, "test_acc") < 0.5 {
		t.Errorf("host 0's last step %d, summary %v: want 200, failures_survived=1 and a trained model", last.step, kv)
	}
	if !strings.Contains(out.String(), "left the fault-tolerant job; the other nodes go on") {
		t.Error("the launcher does not say it went on without host 1")
	}
}
