package fanout_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/agent"
	"github.com/gotrain/gotrain/launch/fanout"
	"github.com/gotrain/gotrain/launch/hosts"
	"github.com/gotrain/gotrain/launch/ssh"
)

// The test binary is the agent (run through the fake ssh) and the
// workers, chosen by GOTRAIN_TEST_WORKER.
func TestMain(m *testing.M) {
	testproc.Dispatch(testproc.Workers{
		"agent": func() int {
			if h := os.Getenv("SILENT_HOST"); h != "" && h == os.Getenv("FAKE_SSH_HOST") {
				// A hung agent: ready, then nothing until killed (the
				// minute ends an orphan).
				fmt.Println(`{"type":"ready"}`)
				time.Sleep(time.Minute)
				return 0
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			if err := agent.Run(ctx, os.Stdin, os.Stdout, nil); err != nil {
				fmt.Fprintln(os.Stderr, "agent:", err)
				return 1
			}
			return 0
		},
		"hello": func() int {
			fmt.Printf("hello rank=%s world=%s group=%s local=%s restart=%s agentstore=%s token=%t\n",
				os.Getenv("RANK"), os.Getenv("WORLD_SIZE"), os.Getenv("GROUP_RANK"), os.Getenv("LOCAL_RANK"),
				os.Getenv("GOTRAIN_RESTART_COUNT"), os.Getenv("GOTRAIN_AGENT_STORE"), len(os.Getenv("GOTRAIN_TOKEN")) == 64)
			fmt.Fprintln(os.Stderr, "to stderr from", os.Getenv("RANK"))
			return 0
		},
		// fail: rank $FAIL_RANK fails with code 3 on restart 0 (every
		// restart without $FAIL_ONCE), once every rank has started,
		// leaving the file "failed" in $PID_DIR; the others wait to be
		// stopped, or exit 0 on a later restart.
		"fail": func() int {
			recordPID()
			rank := os.Getenv("RANK")
			if os.Getenv("FAIL_ONCE") != "" && os.Getenv("GOTRAIN_RESTART_COUNT") != "0" {
				fmt.Println("resumed at restart", os.Getenv("GOTRAIN_RESTART_COUNT"))
				return 0
			}
			if rank == os.Getenv("FAIL_RANK") {
				world, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
				testproc.Poll(time.Minute, func() bool { return len(pidsIn(os.Getenv("PID_DIR"))) >= world })
				_ = os.WriteFile(filepath.Join(os.Getenv("PID_DIR"), "failed"), nil, 0o644)
				fmt.Fprintln(os.Stderr, "boom on rank", rank)
				return 3
			}
			untilStopped()
			return 0
		},
		// fallout: rank 0 (node 0) fails because of rank 3 (event.ExitPeer),
		// and only once it is gone does rank 3 (node 1) fail on its own,
		// with code 3; the others wait to be stopped.
		"fallout": func() int {
			recordPID()
			dir := os.Getenv("PID_DIR")
			switch os.Getenv("RANK") {
			case "0":
				testproc.Poll(time.Minute, func() bool { return len(pidsIn(dir)) >= 4 })
				fmt.Fprintln(os.Stderr, event.PeerLine(3, 0))
				_ = os.WriteFile(filepath.Join(dir, "peer-"+strconv.Itoa(os.Getpid())), nil, 0o644)
				return event.ExitPeer
			case "3":
				var peer int
				testproc.Poll(time.Minute, func() bool {
					m, _ := filepath.Glob(filepath.Join(dir, "peer-*"))
					if len(m) > 0 {
						peer, _ = strconv.Atoi(strings.TrimPrefix(filepath.Base(m[0]), "peer-"))
					}
					return peer != 0
				})
				// Reaped by node 0's launcher: the fallout is on its way.
				testproc.Poll(time.Minute, func() bool { return syscall.Kill(peer, 0) != nil })
				fmt.Fprintln(os.Stderr, "disk full on rank 3")
				return 3
			}
			untilStopped()
			return 0
		},
		// slow: node 1's workers run for a minute, node 0's finish at
		// once, leaving the file "finished-<rank>" in $PID_DIR.
		"slow": func() int {
			recordPID()
			if os.Getenv("GROUP_RANK") == "1" {
				untilStopped()
			}
			_ = os.WriteFile(filepath.Join(os.Getenv("PID_DIR"), "finished-"+os.Getenv("RANK")), nil, 0o644)
			return 0
		},
		// chatty: a line, then a minute's wait.
		"chatty": func() int {
			recordPID()
			fmt.Println("started", os.Getenv("RANK"))
			untilStopped()
			return 0
		},
		// events: each rank sends one progress event.
		"events": func() int {
			f := os.NewFile(3, "events")
			fmt.Fprintf(f, `{"kind":"step","rank":%s}`+"\n", os.Getenv("RANK"))
			return 0
		},
		"sleep": func() int {
			recordPID()
			if os.Getenv("GROUP_RANK") == "1" {
				// Node 1's agent, for a test to kill.
				_ = os.WriteFile(filepath.Join(os.Getenv("PID_DIR"), "agent"), []byte(strconv.Itoa(os.Getppid())), 0o644)
			}
			untilStopped()
			return 0
		},
		// allreduce: every rank joins through the agent's store and sums
		// its rank.
		"allreduce": func() int {
			ctx := context.Background()
			if os.Getenv("FAIL_ONCE") != "" && os.Getenv("RANK") == "3" && os.Getenv("GOTRAIN_RESTART_COUNT") == "0" {
				return 9 // before joining: the others wait in the rendezvous until stopped
			}
			g, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://", Timeout: 20 * time.Second})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer g.Destroy()
			if os.Getenv("PRINT_PLACE") != "" {
				fmt.Printf("place rank=%s world=%s local=%s local_world=%s group=%s\n", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"),
					os.Getenv("LOCAL_RANK"), os.Getenv("LOCAL_WORLD_SIZE"), os.Getenv("GROUP_RANK"))
				fmt.Printf("group rank=%d size=%d\n", g.Rank(), g.Size())
			}
			buf := []float32{float32(g.Rank())}
			if err := g.AllReduce(ctx, buf, distributed.Sum); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Printf("sum=%g\n", buf[0])
			return 0
		},
	})
	os.Exit(m.Run())
}

// recordPID leaves the worker's pid in $PID_DIR, for the tests to check
// that it is gone.
func recordPID() {
	if dir := os.Getenv("PID_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), nil, 0o644)
	}
}

// pidsIn returns the worker pids recorded in dir.
func pidsIn(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// modified is when the file dir/name was written.
func modified(t *testing.T, dir, name string) time.Time {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

// fakeSSH writes an ssh stand-in that runs the remote command here, as
// the agent worker; a host named down* is unreachable.
func fakeSSH(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ssh")
	script := `#!/bin/sh
while [ "$#" -gt 0 ]; do case "$1" in --) shift; break;; -o) shift 2;; *) shift;; esac; done
host=$1; shift
case "$host" in down*) echo "ssh: connect to host $host port 22: Connection refused" >&2; exit 255;; esac
FAKE_SSH_HOST=$host GOTRAIN_TEST_WORKER=agent exec sh -c "$1"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// syncBuf is a buffer safe to read while the launcher writes it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// config is a job of worker on two local "hosts" of two slots each.
func config(t *testing.T, worker string, env ...string) (fanout.Config, *syncBuf, *syncBuf) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hs, err := hosts.Parse("127.0.0.1:2,127.0.0.2:2")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuf
	return fanout.Config{
		Hosts:            hs,
		SSH:              fakeSSHClient(t),
		Gotrain:          self,
		Program:          self,
		MasterPort:       testnet.FreePort(t),
		StopTimeout:      2 * time.Second,
		Env:              append([]string{testproc.Env(worker), launch.EnvAllowLoopback + "=1"}, env...),
		Stdout:           &out,
		Stderr:           &errOut,
		HeartbeatTimeout: 3 * time.Second,
	}, &out, &errOut
}

func fakeSSHClient(t *testing.T) ssh.Client { return ssh.Client{Program: fakeSSH(t)} }

// pidDir returns a directory for recordPID and a check that every pid
// recorded there is gone within limit.
func pidDir(t *testing.T) (string, func(limit time.Duration)) {
	dir := t.TempDir()
	return dir, func(limit time.Duration) {
		t.Helper()
		pids := pidsIn(dir)
		if len(pids) == 0 {
			t.Fatal("no worker recorded its pid")
		}
		deadline := time.Now().Add(limit)
		for _, pid := range pids {
			if !testproc.Poll(time.Until(deadline), func() bool { return syscall.Kill(pid, 0) != nil }) {
				t.Fatalf("worker pid %d still running after %v", pid, limit)
			}
		}
	}
}

func TestRunTwoHostsTwoWorkers(t *testing.T) {
	cfg, out, errOut := config(t, "hello")
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, errOut)
	}
	for r := range 4 {
		want := fmt.Sprintf("[rank%d]: hello rank=%d world=4 group=%d local=%d restart=0 agentstore=1 token=true\n", r, r, r/2, r%2)
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
		if want := fmt.Sprintf("[rank%d]: to stderr from %d\n", r, r); !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestRunAllReduceThroughAgentStore(t *testing.T) {
	cfg, out, errOut := config(t, "allreduce")
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, errOut)
	}
	if n := strings.Count(out.String(), "sum=6\n"); n != 4 {
		t.Fatalf("%d ranks printed sum=6, want 4:\n%s", n, out)
	}
}

// TestRunRestartKeepsTheStore: the restarted ranks meet again in node 0's
// agent's store, which outlived the first attempt.
func TestRunRestartKeepsTheStore(t *testing.T) {
	cfg, out, errOut := config(t, "allreduce", "FAIL_ONCE=1")
	cfg.MaxRestarts = 1
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, errOut)
	}
	if n := strings.Count(out.String(), "sum=6\n"); n != 4 {
		t.Fatalf("%d ranks printed sum=6, want 4:\n%s", n, out)
	}
}

func TestRunFailureStopsEveryNode(t *testing.T) {
	dir, gone := pidDir(t)
	cfg, _, errOut := config(t, "fail", "FAIL_RANK=3", "PID_DIR="+dir)
	var failures []launch.Failure
	cfg.OnFailure = func(f launch.Failure) { failures = append(failures, f) }
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 3 {
		t.Fatalf("Run = %d, %v, want 3, nil; stderr:\n%s", code, err, errOut)
	}
	// The others sleep for a minute unless stopped: within StopTimeout.
	if d, bound := time.Since(modified(t, dir, "failed")), 5*cfg.StopTimeout; d > bound {
		t.Errorf("the job took %v after the failure to stop, want at most %v", d, bound)
	}
	if len(failures) != 1 {
		t.Fatalf("%d failure reports, want 1", len(failures))
	}
	f := failures[0]
	if f.Rank != 3 || f.Host != "127.0.0.2" || f.ExitCode != 3 || !slicesContain(f.Stderr, "boom on rank 3") {
		t.Errorf("root cause %+v, want rank 3 on 127.0.0.2, exit 3, stderr boom", f)
	}
	gone(time.Second)
}

// TestRunRootCauseAfterItsFallout: a rank on node 0 fails because of
// rank 3 on node 1 before rank 3 fails on its own. The root cause is
// rank 3, with its exit code, blamed by rank 0.
func TestRunRootCauseAfterItsFallout(t *testing.T) {
	dir, gone := pidDir(t)
	cfg, _, errOut := config(t, "fallout", "PID_DIR="+dir)
	var failures []launch.Failure
	cfg.OnFailure = func(f launch.Failure) { failures = append(failures, f) }
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 3 || len(failures) != 1 {
		t.Fatalf("Run = %d, %v with %d reports; want 3, nil, one report; stderr:\n%s", code, err, len(failures), errOut)
	}
	f := failures[0]
	if f.Rank != 3 || f.Host != "127.0.0.2" || f.Secondary || f.Cause() != "exit status 3" ||
		!slices.Equal(f.BlamedBy, []int{0}) || !slicesContain(f.Stderr, "disk full on rank 3") {
		t.Errorf("root cause %+v (%s); want rank 3 on 127.0.0.2, exit status 3, blamed by rank 0", f, f.Cause())
	}
	gone(time.Second)
}

func slicesContain(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func TestRunRestartsEveryNode(t *testing.T) {
	cfg, out, errOut := config(t, "fail", "FAIL_RANK=2", "FAIL_ONCE=1", "PID_DIR="+t.TempDir())
	cfg.MaxRestarts = 1
	// Longer than the agents give a silent launcher: the launcher keeps
	// their heartbeat while it waits.
	cfg.RestartBackoff = cfg.HeartbeatTimeout + time.Second
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, errOut)
	}
	for r := range 4 {
		if want := fmt.Sprintf("[rank%d]: resumed at restart 1\n", r); !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut.String(), fmt.Sprintf("restarting every node in %v (restart 1 of 1)", cfg.RestartBackoff)) {
		t.Errorf("no restart with its wait logged:\n%s", errOut)
	}
}

// TestRunRestartBackoffInterrupted: SIGTERM during the wait before a
// restart ends the job there, with 128+SIGTERM, restarting nothing.
func TestRunRestartBackoffInterrupted(t *testing.T) {
	cfg, out, errOut := config(t, "fail", "FAIL_RANK=2", "FAIL_ONCE=1", "PID_DIR="+t.TempDir())
	cfg.MaxRestarts = 1
	cfg.RestartBackoff, cfg.MaxRestartBackoff = time.Hour, time.Hour
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		if testproc.Poll(time.Minute, func() bool { return strings.Contains(errOut.String(), "restarting every node in 1h0m0s") }) {
			cancel(&launch.SignalError{Signal: syscall.SIGTERM})
		}
	}()
	code, err := fanout.Run(ctx, cfg)
	if code != 128+int(syscall.SIGTERM) || !errors.Is(err, launch.ErrInterrupted) {
		t.Fatalf("Run = %d, %v; want %d and ErrInterrupted; stderr:\n%s", code, err, 128+int(syscall.SIGTERM), errOut)
	}
	if strings.Contains(out.String(), "resumed at restart 1") {
		t.Errorf("a node restarted after the interruption:\n%s", out)
	}
}

func TestRunExitWait(t *testing.T) {
	dir, gone := pidDir(t)
	cfg, _, errOut := config(t, "slow", "PID_DIR="+dir)
	cfg.ExitWait = 500 * time.Millisecond
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 1 {
		t.Fatalf("Run = %d, %v, want 1, nil; stderr:\n%s", code, err, errOut)
	}
	// Node 1's workers sleep for a minute unless stopped: once ExitWait
	// has passed after node 0's finished, within StopTimeout.
	finished := modified(t, dir, "finished-0")
	if f1 := modified(t, dir, "finished-1"); f1.After(finished) {
		finished = f1
	}
	if d, bound := time.Since(finished), 5*(cfg.ExitWait+cfg.StopTimeout); d > bound {
		t.Errorf("the job took %v after node 0 finished to end, want at most %v", d, bound)
	}
	if !strings.Contains(errOut.String(), "node 1 (127.0.0.2) still ran after --exit-wait 500ms") {
		t.Errorf("stderr does not name the node still running:\n%s", errOut)
	}
	gone(time.Second)
}

func TestRunUnreachableHost(t *testing.T) {
	cfg, out, errOut := config(t, "hello")
	cfg.Hosts[1].Name = "down.example"
	code, err := fanout.Run(context.Background(), cfg)
	if code != 1 || !errors.Is(err, fanout.ErrNodeLost) {
		t.Fatalf("Run = %d, %v, want 1 and ErrNodeLost", code, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "host down.example: ssh: unreachable (Connection refused)") {
		t.Errorf("error %q does not name the host and cause", msg)
	}
	if strings.Contains(out.String(), "hello") {
		t.Errorf("workers ran although a host was unreachable:\n%s\n%s", out, errOut)
	}
}

func TestRunInterruptStopsEveryNode(t *testing.T) {
	dir, gone := pidDir(t)
	cfg, _, errOut := config(t, "sleep", "PID_DIR="+dir)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		// The 4 workers and node 1's agent are up.
		testproc.Poll(time.Minute, func() bool { e, _ := os.ReadDir(dir); return len(e) == 5 })
		cancel(&launch.SignalError{Signal: syscall.SIGINT})
	}()
	code, err := fanout.Run(ctx, cfg)
	if code != 128+int(syscall.SIGINT) || !errors.Is(err, launch.ErrInterrupted) {
		t.Fatalf("Run = %d, %v, want 130 and ErrInterrupted; stderr:\n%s", code, err, errOut)
	}
	gone(time.Second)
}

func TestRunCollectsLogs(t *testing.T) {
	cfg, _, errOut := config(t, "hello")
	cfg.LogDir = t.TempDir()
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, errOut)
	}
	runs, _ := filepath.Glob(filepath.Join(cfg.LogDir, "*", "127.0.0.2", "attempt_0", "1", "stdout.log"))
	if len(runs) != 1 {
		t.Fatalf("no log of host 127.0.0.2's local rank 1; stderr:\n%s", errOut)
	}
	b, _ := os.ReadFile(runs[0])
	if want := "hello rank=3 world=4"; !strings.HasPrefix(string(b), want) {
		t.Errorf("%s = %q, want it to start with %q", runs[0], b, want)
	}
	errLog, _ := os.ReadFile(filepath.Join(filepath.Dir(runs[0]), "stderr.log"))
	if string(errLog) != "to stderr from 3\n" {
		t.Errorf("stderr.log = %q", errLog)
	}
}

// TestRunUnequalSlots: hosts of 1 and 2 slots run 1 and 2 workers, ranks
// 0 and 1..2 of a world of 3, which meet in one rendezvous and allreduce;
// every console line carries its worker's global rank. The ring goes over
// the sockets, as between real hosts, not through shared memory.
func TestRunUnequalSlots(t *testing.T) {
	cfg, out, errOut := config(t, "allreduce", "PRINT_PLACE=1", "GOTRAIN_ALLREDUCE_ALGO=ring")
	cfg.Hosts[0].Slots, cfg.Hosts[1].Slots = 1, 2
	if got := cfg.Workers(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Workers() = %v, want [1 2]", got)
	}
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, errOut)
	}
	for r, place := range []string{"local=0 local_world=1 group=0", "local=0 local_world=2 group=1", "local=1 local_world=2 group=1"} {
		for _, want := range []string{
			fmt.Sprintf("[rank%d]: place rank=%d world=3 %s\n", r, r, place),
			fmt.Sprintf("[rank%d]: group rank=%d size=3\n", r, r),
			fmt.Sprintf("[rank%d]: sum=3\n", r),
		} {
			if n := strings.Count(out.String(), want); n != 1 {
				t.Errorf("stdout has %q %d times, want once:\n%s", want, n, out)
			}
		}
	}
	if n := strings.Count(out.String(), "sum="); n != 3 {
		t.Errorf("%d ranks printed a sum, want 3:\n%s", n, out)
	}
	// An explicit NProcPerNode still overrides every host's slots.
	cfg.NProcPerNode = 2
	if got := cfg.Workers(); !slices.Equal(got, []int{2, 2}) {
		t.Errorf("Workers() with NProcPerNode 2 = %v, want [2 2]", got)
	}
}

func TestForwardEnv(t *testing.T) {
	got := fanout.ForwardEnv([]string{"HOME=/h", "GOTRAIN_SOCKET_IFNAME=eth", "GOTRAIN_SSH=x", "GOTRAIN_TOKEN=t",
		"GLOO_SOCKET_IFNAME=eth1", "GOTRAIN_PORT_RANGE=1-2"})
	want := []string{"GOTRAIN_SOCKET_IFNAME=eth", "GLOO_SOCKET_IFNAME=eth1", "GOTRAIN_PORT_RANGE=1-2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ForwardEnv = %v, want %v", got, want)
	}
}

func TestRunAgentKilled(t *testing.T) {
	dir, gone := pidDir(t)
	cfg, _, errOut := config(t, "sleep", "PID_DIR="+dir)
	killed := make(chan time.Time, 1)
	go func() {
		var pid int
		testproc.Poll(time.Minute, func() bool {
			b, err := os.ReadFile(filepath.Join(dir, "agent"))
			pid, _ = strconv.Atoi(string(b))
			return err == nil && pid > 0
		})
		killed <- time.Now()
		syscall.Kill(pid, syscall.SIGKILL)
	}()
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 1 {
		t.Fatalf("Run = %d, %v, want 1, nil; stderr:\n%s", code, err, errOut)
	}
	// The lost node's workers sleep for a minute unless stopped.
	if d, bound := time.Since(<-killed), 5*cfg.StopTimeout; d > bound {
		t.Errorf("Run took %v after the agent's kill, want at most %v", d, bound)
	}
	if !strings.Contains(errOut.String(), "lost the agent") || !strings.Contains(errOut.String(), "host=127.0.0.2") {
		t.Errorf("stderr does not name the lost host:\n%s", errOut)
	}
	gone(5 * time.Second)
}

func TestRunSilentAgent(t *testing.T) {
	t.Setenv("SILENT_HOST", "127.0.0.2")
	dir, gone := pidDir(t)
	cfg, _, errOut := config(t, "sleep", "PID_DIR="+dir)
	cfg.HeartbeatTimeout = time.Second
	code, err := fanout.Run(context.Background(), cfg)
	if err != nil || code != 1 {
		t.Fatalf("Run = %d, %v, want 1, nil; stderr:\n%s", code, err, errOut)
	}
	if !strings.Contains(errOut.String(), "host 127.0.0.2: the agent sent nothing for 1s") {
		t.Errorf("stderr does not name the silent host:\n%s", errOut)
	}
	// Under load the 1 s heartbeat timeout may abandon the live agent too;
	// it then stops its workers when its stdin ends, within the agents'
	// own 5 s bound rather than before Run returns.
	gone(5 * time.Second)
}

func TestRunEvents(t *testing.T) {
	cfg, _, errOut := config(t, "events")
	var mu sync.Mutex
	got := map[int]string{}
	cfg.Events = func(rank int, line []byte) {
		mu.Lock()
		defer mu.Unlock()
		got[rank] = string(line)
	}
	if code, err := fanout.Run(context.Background(), cfg); err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, errOut)
	}
	for r := range 4 {
		if want := fmt.Sprintf(`{"kind":"step","rank":%d}`, r); got[r] != want {
			t.Errorf("rank %d: event %q, want %q", r, got[r], want)
		}
	}
}

// TestRunStreamsLogs: the log files fill on the launching machine while
// the workers run.
func TestRunStreamsLogs(t *testing.T) {
	dir, gone := pidDir(t)
	cfg, _, errOut := config(t, "chatty", "PID_DIR="+dir)
	cfg.LogDir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streamed := make(chan bool, 1)
	go func() {
		defer cancel()
		streamed <- testproc.Poll(30*time.Second, func() bool {
			logs, _ := filepath.Glob(filepath.Join(cfg.LogDir, "*", "127.0.0.2", "attempt_0", "0", "stdout.log"))
			if len(logs) != 1 {
				return false
			}
			b, _ := os.ReadFile(logs[0])
			return string(b) == "started 2\n"
		})
	}()
	code, err := fanout.Run(ctx, cfg)
	if !errors.Is(err, launch.ErrInterrupted) || code != 128+int(syscall.SIGTERM) {
		t.Fatalf("Run = %d, %v, want it interrupted; stderr:\n%s", code, err, errOut)
	}
	if !<-streamed {
		t.Fatalf("rank 2's stdout.log did not reach the log directory while it ran; stderr:\n%s", errOut)
	}
	gone(time.Second)
}

// untilStopped blocks a worker until the launcher stops it. It is not a
// wait for an event: the minute only bounds an orphaned worker's life
// should the test itself die.
func untilStopped() { time.Sleep(time.Minute) }
