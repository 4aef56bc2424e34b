package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// The tests below run `gotrain run --hosts` and `gotrain train mnist
// --hosts` against a cluster of network namespaces, each host a real
// sshd (testing/clustertest), from this process's namespace (the
// launching machine, not one of the hosts) unless they say otherwise.
// gotrain is this test binary: ssh sessions on the hosts have
// GOTRAIN_TEST_WORKER=gotrain (sshd's SetEnv), so the agent and the
// workers it starts run as gotrain too, at the same absolute path as
// here unless the test hides it.

// newCluster builds n hosts for gotrain.
func newCluster(t *testing.T, n int, o clustertest.Options) *clustertest.Cluster {
	t.Helper()
	o.Hosts = n
	o.Env = append(o.Env, testproc.Env("gotrain"), "GOTRAIN_NUM_THREADS=1")
	return clustertest.New(t, o)
}

// hostList is the --hosts value for c's hosts by address, slots each.
func hostList(c *clustertest.Cluster, slots int) string {
	var hs []string
	for _, h := range c.Hosts {
		hs = append(hs, fmt.Sprintf("%s:%d", h.Addr, slots))
	}
	return strings.Join(hs, ",")
}

// mnistOnHosts is `gotrain train mnist --hosts …` on c with slots
// workers per host, then more flags.
func mnistOnHosts(c *clustertest.Cluster, slots int, flags ...string) []string {
	args := append([]string{"train", "mnist", "--hosts", hostList(c, slots)}, c.SSHFlags()...)
	return append(append(args, "--progress=false"), flags...)
}

// startGotrain starts `gotrain args...` here with env added, its output
// (both streams) in the returned output; it is killed when the test ends.
func startGotrain(t testing.TB, ctx context.Context, env []string, args ...string) (*os.Process, *output, <-chan int) {
	t.Helper()
	cmd := gotrainCmd(ctx, t, args...)
	cmd.Env = append(cmd.Env, env...)
	out := newOutput(nil)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := make(chan int, 1)
	go func() { cmd.Wait(); code <- cmd.ProcessState.ExitCode() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("gotrain %s:\n%s", strings.Join(args, " "), out.String())
		}
	})
	return cmd.Process, out, code
}

// workers lists the processes on h other than sshd's, the agent and the
// launcher's reaper: the job's workers (or anything they left).
func workers(t testing.TB, h *clustertest.Host) []clustertest.Proc {
	t.Helper()
	ps, err := h.Procs()
	if err != nil {
		t.Fatal(err)
	}
	var ws []clustertest.Proc
	for _, p := range ps {
		if !strings.HasPrefix(p.Cmdline, "sshd:") && !strings.HasSuffix(p.Cmdline, " agent") && p.Cmdline != "gotrain-reaper" {
			ws = append(ws, p)
		}
	}
	return ws
}

// leftovers lists every process other than sshd's on h, and its /dev/shm
// files.
func leftovers(t *testing.T, h *clustertest.Host) (procs []clustertest.Proc, shm []string) {
	t.Helper()
	ps, err := h.Procs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if !strings.HasPrefix(p.Cmdline, "sshd:") {
			procs = append(procs, p)
		}
	}
	shm, err = h.Shm()
	if err != nil {
		t.Fatal(err)
	}
	return procs, shm
}

// waitGone waits up to limit until list returns no process, and returns
// what it lists at the end: it waits for the exits of the processes
// listed (by pidfd), then lists again, for any started meanwhile.
// Zombies have exited and are not listed.
func waitGone(t *testing.T, limit time.Duration, list func() []clustertest.Proc) []clustertest.Proc {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ps := slices.DeleteFunc(list(), func(p clustertest.Proc) bool { return zombie(p.PID) })
		left := time.Until(deadline)
		if len(ps) == 0 || left <= 0 {
			return ps
		}
		var pids []int
		for _, p := range ps {
			pids = append(pids, p.PID)
		}
		w := watchExits(t, pids...)
		w.wait(left)
		w.close()
	}
}

// zombie reports whether pid has exited but not been reaped (or is gone).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// params reads a safetensors model as name → values.
func params(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	entries, _, err := checkpoint.ReadTensorsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]float32{}
	for _, e := range entries {
		m[e.Name] = e.Tensor.Data()
	}
	return m
}

// TestClusterTrainMNIST: 2 hosts × 2 workers train MNIST to the
// parameters of 4 local workers with the same seed, within 1e-6 relative;
// rank 0's summary reports the world of 4.
func TestClusterTrainMNIST(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	dir := t.TempDir()
	job := []string{"--max-steps", "8", "--seed", "7"}
	local := filepath.Join(dir, "local.safetensors")
	all, _, code := runGotrain(t, 60*time.Second, append([]string{"train", "mnist", "--progress=false", "--nproc-per-node", "4", "--save", local}, job...)...)
	if code != 0 {
		t.Fatalf("4 local workers: exit code %d:\n%s", code, all)
	}
	remote := filepath.Join(dir, "cluster.safetensors")
	all, stdout, code := runGotrain(t, 60*time.Second, append(mnistOnHosts(c, 2, "--save", remote), job...)...)
	if code != 0 {
		t.Fatalf("2 hosts × 2 workers: exit code %d:\n%s", code, all)
	}
	if kv := summary(t, stdout); kv["world"] != "4" || kv["steps"] != "8" {
		t.Errorf("summary %v: want world=4 steps=8", kv)
	}
	// The nodes add their ranks' gradients in another order than four
	// local workers do, so the last bits may differ: each tensor is
	// compared relative to its largest value.
	want, got := params(t, local), params(t, remote)
	if len(got) != len(want) {
		t.Fatalf("%d tensors on the cluster, %d locally", len(got), len(want))
	}
	worst := 0.0
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Fatalf("%s: %d values on the cluster, %d locally", name, len(g), len(w))
		}
		scale, diff, at := 0.0, 0.0, 0
		for i := range w {
			scale = math.Max(scale, math.Abs(float64(w[i])))
			if d := math.Abs(float64(g[i] - w[i])); d > diff {
				diff, at = d, i
			}
		}
		if diff > 1e-6*scale {
			t.Errorf("%s[%d] = %g on the cluster, %g locally: %.2g relative to the tensor's largest value %g",
				name, at, g[at], w[at], diff/scale, scale)
		}
		worst = math.Max(worst, diff/scale)
	}
	t.Logf("largest difference from 4 local workers: %.2g relative", worst)
}

// TestClusterCopy: on hosts that have neither gotrain nor the program
// (this test binary's directory is hidden there), the job fails in
// pre-flight naming a host without --copy, and runs with it from
// ~/.cache/gotrain/bin/<sha256>/ on each host.
func TestClusterCopy(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 2, clustertest.Options{Hide: []string{filepath.Dir(exe)}})
	all, _, code := runGotrain(t, 60*time.Second, mnistOnHosts(c, 1, "--max-steps", "2")...)
	missing := 0
	for l := range strings.Lines(all) {
		for _, h := range c.Hosts {
			if strings.Contains(l, h.Addr) && strings.Contains(l, "gotrain not found") {
				missing++
				t.Logf("without --copy: %s", strings.TrimSpace(l))
			}
		}
	}
	if code == 0 || missing < len(c.Hosts) {
		t.Errorf("without --copy: exit code %d, want a failure naming each host as missing gotrain:\n%s", code, all)
	}
	if strings.Contains(all, "[rank") {
		t.Errorf("without --copy, a worker started:\n%s", all)
	}
	all, stdout, code := runGotrain(t, 60*time.Second, mnistOnHosts(c, 1, "--max-steps", "2", "--copy")...)
	if code != 0 {
		t.Fatalf("--copy: exit code %d:\n%s", code, all)
	}
	if kv := summary(t, stdout); kv["world"] != "2" {
		t.Errorf("summary %v: want world=2", kv)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	for _, h := range c.Hosts {
		cached := filepath.Join(h.Home, ".cache", "gotrain", "bin", hex.EncodeToString(sum[:]))
		ents, err := os.ReadDir(cached)
		if err != nil || len(ents) == 0 {
			t.Errorf("%s: nothing in %s: %v", h.Name, cached, err)
		}
	}
}

// TestClusterDifferentProgram: the program on host 1 is another build
// than on host 0; the job is refused, naming host 1.
func TestClusterDifferentProgram(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 2, clustertest.Options{})
	for _, h := range c.Hosts {
		h.Install(t, exe, "trainer")
	}
	// Another build: the same program with one more byte (an ELF file
	// runs with trailing data).
	f, err := os.OpenFile(filepath.Join(c.Hosts[1].Bin, "trainer"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	args := append([]string{"run", "--hosts", hostList(c, 1)}, c.SSHFlags()...)
	args = append(args, "/usr/local/bin/trainer", "train", "mnist", "--max-steps", "2", "--progress=false")
	all, _, code := runGotrain(t, 60*time.Second, args...)
	if code == 0 {
		t.Fatalf("two builds of the program: exit code 0:\n%s", all)
	}
	named := false
	for l := range strings.Lines(all) {
		if (strings.Contains(l, c.Hosts[1].Addr) || strings.Contains(l, c.Hosts[1].Name)) &&
			regexp.MustCompile(`(?i)differ|mismatch`).MatchString(l) {
			named = true
			t.Logf("refused: %s", strings.TrimSpace(l))
		}
	}
	if !named {
		t.Errorf("no line names %s (%s) and the different build:\n%s", c.Hosts[1].Name, c.Hosts[1].Addr, all)
	}
}

// TestClusterSSHRefused: ssh to host 1 is refused: one line names it
// and the cause before anything starts, on any host.
func TestClusterSSHRefused(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	c.Hosts[1].RejectTCP(t, "22")
	start := time.Now()
	all, _, code := runGotrain(t, 30*time.Second, mnistOnHosts(c, 1, "--max-steps", "2")...)
	took := time.Since(start)
	if code == 0 {
		t.Fatalf("exit code 0:\n%s", all)
	}
	var lines []string
	for l := range strings.Lines(all) {
		if strings.Contains(l, c.Hosts[1].Addr) && strings.Contains(l, "unreachable") && strings.Contains(l, "Connection refused") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Errorf("%d lines name %s as unreachable (connection refused), want 1:\n%s", len(lines), c.Hosts[1].Addr, all)
	}
	if strings.Contains(all, "[rank") {
		t.Errorf("a worker started:\n%s", all)
	}
	// Node 0's pre-flight session may still be exiting when gotrain
	// returns: it must be gone soon, and no worker may appear.
	if left := waitGone(t, 3*time.Second, func() []clustertest.Proc { return workers(t, c.Hosts[0]) }); len(left) > 0 {
		t.Errorf("processes on %s 3 s after gotrain exited: %v", c.Hosts[0].Name, left)
	}
	t.Logf("refused in %v: %s", took.Round(time.Millisecond), strings.TrimSpace(strings.Join(lines, "")))
}

// TestClusterFirewall: host 1 drops connections to the data-plane ports
// (GOTRAIN_PORT_RANGE's default, 29600-29700): pre-flight names the pair
// and the timeout before any worker starts; with the range moved to
// open ports the job runs.
func TestClusterFirewall(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	c.Hosts[1].DropTCP(t, "29600-29700")
	all, _, code := runGotrain(t, 60*time.Second, mnistOnHosts(c, 1, "--max-steps", "2")...)
	if code == 0 {
		t.Fatalf("blocked data plane: exit code 0:\n%s", all)
	}
	a, b := c.Hosts[0], c.Hosts[1]
	named := false
	for l := range strings.Lines(all) {
		if (strings.Contains(l, a.Addr) || strings.Contains(l, a.Name)) &&
			(strings.Contains(l, b.Addr) || strings.Contains(l, b.Name)) && strings.Contains(l, "timed out") {
			named = true
			t.Logf("pre-flight: %s", strings.TrimSpace(l))
		}
	}
	if !named {
		t.Errorf("no line names the pair %s → %s as timed out:\n%s", a.Name, b.Name, all)
	}
	if strings.Contains(all, "[rank") {
		t.Errorf("a worker started before pre-flight refused the job:\n%s", all)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := gotrainCmd(ctx, t, mnistOnHosts(c, 1, "--max-steps", "2")...)
	cmd.Env = append(cmd.Env, "GOTRAIN_PORT_RANGE=30000-30100")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("GOTRAIN_PORT_RANGE=30000-30100: %v:\n%s", err, out)
	}
}

// TestClusterHostnameLoopback: every host's /etc/hosts maps its own name
// to 127.0.1.1, as Debian's installer writes it, and the job names the
// hosts (node0, node1), launched from node 1. No rank advertises a
// loopback address, and the job runs.
func TestClusterHostnameLoopback(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 2, clustertest.Options{})
	for i, h := range c.Hosts {
		other := c.Hosts[1-i]
		h.SetHosts(t, fmt.Sprintf("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n%s\t%s\n", h.Name, other.Addr, other.Name))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"train", "mnist", "--hosts", "node0:1,node1:1"}, c.SSHFlags()...)
	cmd := c.Hosts[1].Command(ctx, exe, append(args, "--max-steps", "2", "--progress=false")...)
	cmd.Env = append(testproc.Environ("gotrain"), "GOTRAIN_NUM_THREADS=1", "PATH="+childPATH)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("launched from node1: %v:\n%s", err, out)
	}
	var adv []string
	for l := range strings.Lines(string(out)) {
		if strings.Contains(l, "advertising address") {
			adv = append(adv, strings.TrimSpace(l))
			if strings.Contains(l, "address=127.") {
				t.Errorf("a rank advertises loopback: %s", l)
			}
		}
	}
	if len(adv) != 2 {
		t.Errorf("%d ranks logged their address, want 2:\n%s", len(adv), out)
	}
	for _, h := range c.Hosts {
		if !strings.Contains(strings.Join(adv, "\n"), "address="+h.Addr+" ") {
			t.Errorf("no rank advertises %s's address %s: %q", h.Name, h.Addr, adv)
		}
	}
}

// startTraining starts a long MNIST job on c (slots workers per host)
// that checkpoints every 5 steps, and waits for its first checkpoint:
// then every rank is training.
func startTraining(t *testing.T, c *clustertest.Cluster, slots int, flags ...string) (*os.Process, *output, <-chan int, string) {
	t.Helper()
	return startTrainingEnv(t, c, nil, slots, flags...)
}

// startTrainingEnv is startTraining with env added to the launcher's
// environment (whose GOTRAIN_* variables reach every host's workers).
func startTrainingEnv(t *testing.T, c *clustertest.Cluster, env []string, slots int, flags ...string) (*os.Process, *output, <-chan int, string) {
	t.Helper()
	save := filepath.Join(t.TempDir(), "model.safetensors")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	args := mnistOnHosts(c, slots, append([]string{"--epochs", "20", "--save", save, "--save-every", "5"}, flags...)...)
	p, out, code := startGotrain(t, ctx, env, args...)
	waitFile(t, checkpoint.TrainingPath(save), 40*time.Second, out)
	return p, out, code, save
}

// TestClusterLinkDown: host 1's link goes down mid-training: rank 0
// fails naming its peer within 10 s, host 1's workers are gone within
// 10 s, and the launcher exits non-zero within 15 s. The peers' silence
// bound is 3 s here (15 s by default), so that rank 0 finds the lost
// peer itself before the launcher gives up on host 1's agent (5 s) and
// stops it: otherwise whether its last line names the peer depends on
// where the stop finds it.
func TestClusterLinkDown(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	_, out, code, _ := startTrainingEnv(t, c, []string{"GOTRAIN_HEARTBEAT_TIMEOUT=3s"}, 1)
	cut := time.Now()
	c.Hosts[1].LinkDown(t)
	if !out.waitFor(10*time.Second, func(s string) bool {
		for l := range strings.Lines(s) {
			if strings.HasPrefix(l, "[rank0]:") && strings.Contains(l, "peer rank 1") {
				return true
			}
		}
		return false
	}) {
		t.Errorf("rank 0 did not fail naming rank 1 within 10 s of the cut")
	} else {
		t.Logf("rank 0 failed %v after the cut", time.Since(cut).Round(time.Millisecond))
	}
	if left := waitGone(t, 10*time.Second-time.Since(cut), func() []clustertest.Proc { return workers(t, c.Hosts[1]) }); len(left) > 0 {
		t.Errorf("workers still on %s 10 s after the cut: %v", c.Hosts[1].Name, left)
	} else {
		t.Logf("%s's workers gone %v after the cut", c.Hosts[1].Name, time.Since(cut).Round(time.Millisecond))
	}
	select {
	case code := <-code:
		t.Logf("launcher exited with %d, %v after the cut", code, time.Since(cut).Round(time.Millisecond))
		if code == 0 {
			t.Errorf("launcher exit code 0 after the link went down")
		}
	case <-time.After(15*time.Second - time.Since(cut)):
		t.Errorf("launcher still running 15 s after the cut")
	}
}

// TestClusterLauncherKilled: the launcher is SIGKILLed mid-training:
// within 5 s no process of the job (agent, worker) and no /dev/shm file
// is left on any host.
func TestClusterLauncherKilled(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	p, _, code, _ := startTraining(t, c, 2)
	for _, h := range c.Hosts {
		if len(workers(t, h)) == 0 {
			t.Fatalf("no worker on %s while training", h.Name)
		}
	}
	killed := time.Now()
	p.Signal(syscall.SIGKILL)
	<-code
	for _, h := range c.Hosts {
		procs := waitGone(t, 5*time.Second-time.Since(killed), func() []clustertest.Proc { ps, _ := leftovers(t, h); return ps })
		// The host's /dev/shm is in its own mount namespace, out of this
		// process's inotify's sight: it is listed until empty.
		var shm []string
		poll(5*time.Second-time.Since(killed), 50*time.Millisecond, func() bool { _, shm = leftovers(t, h); return len(shm) == 0 })
		if len(procs) > 0 || len(shm) > 0 {
			t.Errorf("%s, 5 s after the launcher was killed: processes %v, /dev/shm %v", h.Name, procs, shm)
		}
	}
	t.Logf("all gone %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
}

// TestClusterRestart: with --max-restarts 1, the worker on host 1 is
// killed mid-training; every node restarts together, resumes from the
// checkpoint and completes.
func TestClusterRestart(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	_, out, code, _ := startTraining(t, c, 1, "--max-restarts", "1", "--resume", "--max-steps", "40")
	ws := workers(t, c.Hosts[1])
	if len(ws) != 1 {
		t.Fatalf("%d workers on %s, want 1: %v", len(ws), c.Hosts[1].Name, ws)
	}
	if err := syscall.Kill(ws[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-code:
		if code != 0 {
			t.Fatalf("exit code %d after one restart:\n%s", code, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("still running 60 s after the kill:\n%s", out.String())
	}
	all := out.String()
	if !strings.Contains(all, "resumed") {
		t.Errorf("no rank resumed from the checkpoint:\n%s", all)
	}
	if kv := summary(t, lastRank0Line(all)); kv["world"] != "2" {
		t.Errorf("summary %v: want world=2", kv)
	}
}

// lastRank0Line is the last summary line of out: rank 0's, printed
// unprefixed by train mnist --hosts, or "[rank0]: "-prefixed by a program
// under gotrain run.
func lastRank0Line(out string) string {
	last := ""
	for l := range strings.Lines(out) {
		if strings.HasPrefix(strings.TrimPrefix(l, "[rank0]: "), "model=") {
			last = l
		}
	}
	return last
}

// TestClusterBenchAllreduce: `gotrain bench allreduce --hosts` runs one
// rank per host over ssh and prints rank 0's results, one line per
// size, and nothing of rank 1's.
func TestClusterBenchAllreduce(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	args := append([]string{"bench", "allreduce", "--hosts", hostList(c, 1), "--sizes", "4096,1048576"}, c.SSHFlags()...)
	all, stdout, code := runGotrain(t, 60*time.Second, args...)
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, all)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("stdout has %d lines, want one per size:\n%s", len(lines), stdout)
	}
	for i, size := range []string{"4096", "1048576"} {
		f := strings.Fields(lines[i])
		if len(f) != 6 || f[0] != "op=allreduce" || f[1] != "world=2" || f[2] != "bytes="+size || !strings.HasPrefix(f[5], "busbw_GBps=") {
			t.Errorf("line %d: %q, want op=allreduce world=2 bytes=%s … busbw_GBps=", i, lines[i], size)
		}
	}
}

// TestClusterMetricsAndTrace: `train mnist --hosts … --metrics --trace`
// writes one metrics file and one timeline on the launching machine,
// merged from every rank of both hosts.
func TestClusterMetricsAndTrace(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	dir := t.TempDir()
	file, trace := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "t.json")
	args := append([]string{"train", "mnist", "--hosts", hostList(c, 2)}, c.SSHFlags()...)
	args = append(args, "--max-steps", "6", "--metrics", file, "--trace", trace)
	all, _, code := runGotrain(t, 60*time.Second, args...)
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, all)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the launcher wrote no metrics file: %v\n%s", err, all)
	}
	steps := map[int]int{}
	for l := range strings.Lines(string(b)) {
		var row struct{ Rank, Step int }
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		steps[row.Rank]++
	}
	for r := range 4 {
		if steps[r] != 6 {
			t.Errorf("rank %d has %d rows in the merged file, want 6 (all: %v)", r, steps[r], steps)
		}
	}
	b, err = os.ReadFile(trace)
	if err != nil {
		t.Fatalf("the launcher wrote no trace: %v", err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string
			PID  int
		}
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("the trace is not trace-event JSON: %v", err)
	}
	reduced := map[int]bool{}
	for _, e := range tr.TraceEvents {
		if strings.HasPrefix(e.Name, "allreduce bucket") {
			reduced[e.PID] = true
		}
	}
	if len(reduced) != 4 {
		t.Errorf("allreduce spans of ranks %v in the merged trace, want all 4", reduced)
	}
}

// TestClusterTrainGPT: `train gpt --hosts` on 2 hosts × 1 worker ends
// with the losses of 2 local workers with the same seed.
func TestClusterTrainGPT(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	job := []string{"--max-steps", "4", "--n-layer", "1", "--n-embd", "32", "--block-size", "32", "--batch-size", "4",
		"--eval-every", "4", "--eval-batches", "2", "--progress=false"}
	args := append(append([]string{"train", "gpt", "--hosts", hostList(c, 1)}, c.SSHFlags()...), job...)
	all, stdout, code := runGotrain(t, 90*time.Second, args...)
	if code != 0 {
		t.Fatalf("--hosts: exit code %d:\n%s", code, all)
	}
	localAll, local, code := runGotrain(t, 90*time.Second, append([]string{"train", "gpt", "--nproc-per-node", "2"}, job...)...)
	if code != 0 {
		t.Fatalf("2 local workers: exit code %d:\n%s", code, localAll)
	}
	losses := func(out string) string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var keep []string
		for _, f := range strings.Fields(lines[len(lines)-1]) {
			if strings.HasPrefix(f, "model=") || strings.HasPrefix(f, "world=") || strings.HasPrefix(f, "steps=") ||
				strings.HasPrefix(f, "train_loss=") || strings.HasPrefix(f, "val_loss=") {
				keep = append(keep, f)
			}
		}
		return strings.Join(keep, " ")
	}
	got, want := losses(stdout), losses(local)
	if !strings.Contains(got, "model=gpt world=2 steps=4") || got != want {
		t.Fatalf("--hosts summary %q, want the local workers' %q\n%s", got, want, all)
	}
}
