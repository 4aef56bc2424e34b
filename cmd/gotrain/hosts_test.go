package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testnet"
)

// useFakeSSH makes ssh run the remote command on this machine, as this
// test binary running gotrain, and lets the "hosts" 127.0.0.1 and
// 127.0.0.2 (both this machine) form a job.
func useFakeSSH(t *testing.T) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ssh")
	script := `#!/bin/sh
while [ "$#" -gt 0 ]; do case "$1" in --) shift; break;; -o) shift 2;; *) shift;; esac; done
host=$1; shift
case "$host" in down*) echo "ssh: connect to host $host port 22: Connection refused" >&2; exit 255;; esac
GOTRAIN_TEST_WORKER=gotrain exec sh -c "$1"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOTRAIN_SSH", path)
	t.Setenv("GOTRAIN_ALLOW_LOOPBACK", "1")
}

func TestRunHostsTwoByTwo(t *testing.T) {
	useFakeSSH(t)
	port := strconv.Itoa(testnet.FreePort(t))
	all, stdout, code := runGotrain(t, 30*time.Second, "run", "--hosts", "127.0.0.1:2,127.0.0.2:2", "--master-port", port,
		"sh", "-c", `echo "$RANK/$WORLD_SIZE node $GROUP_RANK"`)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, all)
	}
	for _, want := range []string{"[rank0]: 0/4 node 0", "[rank1]: 1/4 node 0", "[rank2]: 2/4 node 1", "[rank3]: 3/4 node 1"} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("stdout lacks %q:\n%s", want, all)
		}
	}
}

// TestRunHostsUnequalSlots: hosts of a hostfile with 1 and 2 slots run 1
// and 2 workers, ranked in host order in a world of 3; --nproc-per-node
// overrides every host's slots.
func TestRunHostsUnequalSlots(t *testing.T) {
	useFakeSSH(t)
	hf := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(hf, []byte("# node 0 first\n127.0.0.1 slots=1\n127.0.0.2 slots=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `echo "$RANK/$WORLD_SIZE node $GROUP_RANK local $LOCAL_RANK/$LOCAL_WORLD_SIZE"`
	port := strconv.Itoa(testnet.FreePort(t))
	all, stdout, code := runGotrain(t, 30*time.Second, "run", "--hostfile", hf, "--master-port", port, "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, all)
	}
	want := []string{"[rank0]: 0/3 node 0 local 0/1", "[rank1]: 1/3 node 1 local 0/2", "[rank2]: 2/3 node 1 local 1/2"}
	if got := strings.Split(strings.TrimSpace(stdout), "\n"); !sameLines(got, want) {
		t.Errorf("stdout %q, want the lines %q:\n%s", got, want, all)
	}
	all, stdout, code = runGotrain(t, 30*time.Second, "run", "--hostfile", hf, "--nproc-per-node", "1", "--master-port", port, "sh", "-c", script)
	if code != 0 {
		t.Fatalf("--nproc-per-node 1: exit %d:\n%s", code, all)
	}
	want = []string{"[rank0]: 0/2 node 0 local 0/1", "[rank1]: 1/2 node 1 local 0/1"}
	if got := strings.Split(strings.TrimSpace(stdout), "\n"); !sameLines(got, want) {
		t.Errorf("--nproc-per-node 1: stdout %q, want the lines %q:\n%s", got, want, all)
	}
}

// sameLines reports whether got and want hold the same lines in any order.
func sameLines(got, want []string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

func TestRunHostsFailureExitCode(t *testing.T) {
	useFakeSSH(t)
	port := strconv.Itoa(testnet.FreePort(t))
	start := time.Now()
	all, _, code := runGotrain(t, 30*time.Second, "run", "--hosts", "127.0.0.1:2,127.0.0.2:2", "--master-port", port,
		"--stop-timeout", "1s", "sh", "-c", `if [ "$RANK" = 3 ]; then sleep 0.3; echo "disk on fire" >&2; exit 7; fi; exec sleep 30`)
	if code != 7 {
		t.Fatalf("exit %d, want 7:\n%s", code, all)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v", d)
	}
	for _, want := range []string{"root cause: rank 3 (local rank 1) on 127.0.0.2", "exit status 7", "disk on fire"} {
		if !strings.Contains(all, want) {
			t.Errorf("output lacks %q:\n%s", want, all)
		}
	}
}

func TestRunHostsUnreachable(t *testing.T) {
	useFakeSSH(t)
	all, _, code := runGotrain(t, 30*time.Second, "run", "--hosts", "127.0.0.1,down.example", "true")
	if code != 1 || !strings.Contains(all, "down.example") || !strings.Contains(all, "unreachable") {
		t.Fatalf("exit %d, want 1 and a line naming down.example unreachable:\n%s", code, all)
	}
}

func TestRunHostsBadFlags(t *testing.T) {
	useFakeSSH(t)
	hf := filepath.Join(t.TempDir(), "hostfile")
	os.WriteFile(hf, []byte("a slots=2\nb slots=x\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hosts", "a,b", "--hostfile", hf}, "--hosts: give --hosts or --hostfile, not both"},
		{[]string{"--hosts", "a,b", "--nnodes", "2"}, "--nnodes: not with --hosts"},
		{[]string{"--hosts", "a,b", "--node-rank", "1"}, "--node-rank: not with --hosts"},
		{[]string{"--hosts", "a,b", "--master-addr", "a"}, "--master-addr: not with --hosts"},
		{[]string{"--hosts", "a,,b"}, "--hosts a,,b: "},
		{[]string{"--hosts", "a:0"}, "--hosts a:0: "},
		{[]string{"--hosts", "a,a"}, "listed twice"},
		{[]string{"--hostfile", hf}, "--hostfile " + hf + ": "},
		{[]string{"--hosts", "a,b", "--exit-wait", "0s"}, "--exit-wait 0s: must be a positive duration"},
		{[]string{"--copy"}, "--copy: needs --hosts or --hostfile"},
		{[]string{"--exit-wait", "5s"}, "--exit-wait: needs --hosts or --hostfile"},
		{[]string{"--hosts", "a,b", "--ssh-option", "Port"}, "--ssh-option Port: must be KEY=VALUE"},
		{[]string{"--hosts", "a,b", "--nproc-per-node", "auto"}, "--nproc-per-node auto: counts this machine's CPUs"},
	} {
		args := append(append([]string{"run"}, tc.args...), "true")
		all, _, code := runGotrain(t, 10*time.Second, args...)
		lines := strings.Split(strings.TrimSpace(all), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(all, tc.want) {
			t.Errorf("gotrain %v: exit %d, output:\n%s\nwant exit 2 and one line with %q", args, code, all, tc.want)
		}
	}
	t.Setenv("GOTRAIN_ALLOW_LOOPBACK", "")
	all, _, code := runGotrain(t, 10*time.Second, "run", "--hosts", "127.0.0.1,b", "true")
	if code != 2 || !strings.Contains(all, "loopback") {
		t.Errorf("loopback node 0: exit %d:\n%s", code, all)
	}
}

// TestRunHostsLauncherKilled: a SIGKILLed launcher leaves no worker on
// any host within 5 s; SIGINT stops them all before the launcher exits
// with 130.
func TestRunHostsLauncherKilled(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) { killLauncher(t, sig) })
	}
}

func killLauncher(t *testing.T, sig syscall.Signal) {
	useFakeSSH(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The agents stop their workers with SIGTERM, and SIGKILL after this
	// grace; sleep ends at SIGTERM.
	const grace = time.Second
	cmd := gotrainCmd(ctx, t, "run", "--hosts", "127.0.0.1:2,127.0.0.2:2", "--master-port", strconv.Itoa(testnet.FreePort(t)),
		"--stop-timeout", grace.String(), "sh", "-c", `echo "pid $$"; exec sleep 60`)
	out := newOutput(nil)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pidRe := regexp.MustCompile(`(?m)^\[rank\d\]: pid (\d+)\n`) // whole lines
	if !out.waitFor(20*time.Second, func(s string) bool { return len(pidRe.FindAllString(s, -1)) == 4 }) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("workers did not start:\n%s", out.String())
	}
	var pids []int
	for _, m := range pidRe.FindAllStringSubmatch(out.String(), -1) {
		pid, _ := strconv.Atoi(m[1])
		pids = append(pids, pid)
	}
	workers := watchExits(t, pids...) // while they run: their pids are theirs
	cmd.Process.Signal(sig)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); sig == syscall.SIGINT && code != 130 {
		t.Errorf("exit %d after SIGINT, want 130:\n%s", code, out.String())
	}
	// After SIGINT the launcher stops the workers before it exits: none
	// may be left when it has. After SIGKILL each agent finds its
	// launcher gone (its stdin ends) and stops its workers: within a few
	// times the grace.
	limit := 5 * grace
	if sig == syscall.SIGINT {
		limit = 0
	}
	if running := workers.wait(limit); len(running) > 0 {
		t.Fatalf("workers %v (of %v) still running %v after the launcher got %v:\n%s", running, pids, limit, sig, out.String())
	}
}

func TestTrainMNISTHosts(t *testing.T) {
	useFakeSSH(t)
	port := strconv.Itoa(testnet.FreePort(t))
	all, stdout, code := runGotrain(t, 60*time.Second, "train", "mnist", "--hosts", "127.0.0.1,127.0.0.2", "--master-port", port,
		"--max-steps", "3", "--progress=false")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, all)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "model=mlp world=2 ") {
		t.Errorf("last line %q, want the summary, unprefixed", last)
	}
	kv := summary(t, stdout)
	if kv["world"] != "2" {
		t.Errorf("summary %v, want world=2:\n%s", kv, all)
	}
}

// TestRunHostsCopy: with --copy the agents run from the hosts' cache.
func TestRunHostsCopy(t *testing.T) {
	useFakeSSH(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	port := strconv.Itoa(testnet.FreePort(t))
	all, stdout, code := runGotrain(t, 60*time.Second, "run", "--copy", "--hosts", "127.0.0.1,127.0.0.2", "--master-port", port,
		"sh", "-c", `readlink /proc/$PPID/exe`)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, all)
	}
	cache := filepath.Join(home, ".cache", "gotrain", "bin") + "/"
	for _, r := range []string{"[rank0]: ", "[rank1]: "} {
		if !strings.Contains(stdout, r+cache) {
			t.Errorf("%sagent not run from %s:\n%s", r, cache, all)
		}
	}
}

// TestRunHostsPreflightFails: a problem found on the hosts is one line per
// host, before any worker starts.
func TestRunHostsPreflightFails(t *testing.T) {
	useFakeSSH(t)
	all, _, code := runGotrain(t, 30*time.Second, "run", "--hosts", "127.0.0.1,127.0.0.2", "--master-port", strconv.Itoa(testnet.FreePort(t)),
		"/nonexistent/prog")
	want := "gotrain: pre-flight check failed; no worker started\n" +
		"gotrain: host 127.0.0.1: program /nonexistent/prog not found: copy it there\n" +
		"gotrain: host 127.0.0.2: program /nonexistent/prog not found: copy it there\n"
	if code != 1 || all != want {
		t.Errorf("exit %d, output:\n%s\nwant exit 1 and:\n%s", code, all, want)
	}
}
