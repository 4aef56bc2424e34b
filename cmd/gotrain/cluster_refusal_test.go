package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// The tests below start a multi-node job by hand, one `gotrain run
// --nnodes 2 --node-rank N` per host of a namespace cluster (as a user
// types it on each machine), and refuse one node: the other must fail
// with the refused node's reason within seconds, not at its 60 s connect
// timeout.

// refusalToken is the job's shared GOTRAIN_TOKEN.
const refusalToken = "0123456789abcdef0123456789abcdef"

// nodeOnHost starts `gotrain args...` on h (in its namespaces, without
// ssh), its output in the returned output; exited receives its exit code
// and closes when it has gone.
func nodeOnHost(t *testing.T, ctx context.Context, h *clustertest.Host, args ...string) (*output, <-chan int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(ctx, exe, args...)
	cmd.Env = append(testproc.Environ("gotrain"), "GOTRAIN_NUM_THREADS=1", "GOTRAIN_SHM=0", "PATH="+childPATH,
		"GOTRAIN_TOKEN="+refusalToken)
	out := newOutput(nil)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := make(chan int, 1)
	go func() {
		cmd.Wait()
		code <- cmd.ProcessState.ExitCode()
		close(code)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-code
		if t.Failed() {
			t.Logf("%s: gotrain %s:\n%s", h.Name, strings.Join(args, " "), out.String())
		}
	})
	return out, code
}

// byHand is `gotrain run` for node rank of a 2-node job with one worker
// each, node 0 at master, running program and its args.
func byHand(rank int, master string, program ...string) []string {
	return append([]string{"run", "--nnodes", "2", "--node-rank", strconv.Itoa(rank), "--nproc-per-node", "1",
		"--master-addr", master, "--master-port", "29500"}, program...)
}

// mnistWorker is the program of a by-hand job: this binary as `gotrain
// train mnist`, long enough to still run when the test stops it.
func mnistWorker(t *testing.T) []string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "train", "mnist", "--epochs", "1000", "--progress=false"}
}

// exitWithin waits up to limit for a node's exit code.
func exitWithin(t *testing.T, who string, code <-chan int, limit time.Duration, out *output) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(limit):
		t.Fatalf("%s still runs %v later; output:\n%s", who, limit, out.String())
		return 0
	}
}

// refuseNodeOne starts node 0 of a 2-node job by hand, waits for its
// rank at its store, then starts node 1 with node1 as the program and its
// arguments. Node 1 must exit non-zero (with want1, unless it is 0) and
// node 0 must then fail too. It returns both outputs and how long node 0
// took to fail after node 1 exited.
func refuseNodeOne(t *testing.T, want1 int, node1 ...string) (out0, out1 string, took time.Duration) {
	t.Helper()
	c := newCluster(t, 2, clustertest.Options{})
	h0, h1 := c.Hosts[0], c.Hosts[1]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o0, code0 := nodeOnHost(t, ctx, h0, byHand(0, h0.Addr, mnistWorker(t)...)...)
	// Rank 0 serves the store and waits for rank 1.
	if !o0.waitFor(60*time.Second, func(s string) bool { return strings.Contains(s, "advertising address") }) {
		t.Fatalf("node 0's rank never reached its store:\n%s", o0.String())
	}
	o1, code1 := nodeOnHost(t, ctx, h1, byHand(1, h0.Addr, node1...)...)
	if c := exitWithin(t, "node 1", code1, 30*time.Second, o1); c == 0 || want1 != 0 && c != want1 {
		t.Fatalf("node 1: exit code %d, want %d (refused):\n%s", c, want1, o1.String())
	}
	refused := time.Now()
	// Generous for a busy machine: the point is "not the 60 s timeout".
	if c := exitWithin(t, "node 0", code0, 30*time.Second, o0); c == 0 {
		t.Fatalf("node 0: exit code 0 after node 1 refused:\n%s", o0.String())
	}
	return o0.String(), o1.String(), time.Since(refused)
}

// TestClusterRefusedNodeStopsOthers: node 0 waits for node 1's rank;
// node 1 is refused at start (its program is not there): it tells node
// 0's store why, and node 0 fails with that reason within seconds.
func TestClusterRefusedNodeStopsOthers(t *testing.T) {
	all, out1, took := refuseNodeOne(t, 2, "/opt/trainer-not-deployed", "--epochs", "1")
	if !strings.Contains(out1, "told node 0") {
		t.Errorf("node 1 does not say it told node 0:\n%s", out1)
	}
	if !strings.Contains(all, "node 1 refused: ") || !strings.Contains(all, "/opt/trainer-not-deployed") {
		t.Fatalf("node 0's output does not name node 1's refusal and its reason:\n%s", all)
	}
	t.Logf("node 0 failed %v after node 1's refusal: %s", took.Round(time.Millisecond), firstLineWith(all, "node 1 refused"))
}

// TestClusterRefusedWorkerFlag: node 1's workers are given a job flag
// its launcher does not check (--epochs 0): the worker that refuses it
// tells node 0's store, and node 0 fails with the reason.
func TestClusterRefusedWorkerFlag(t *testing.T) {
	all, _, took := refuseNodeOne(t, 0, append(mnistWorker(t), "--epochs", "0")...)
	if !strings.Contains(all, "node 1 refused: rank 1: --epochs 0: must be at least 1") {
		t.Fatalf("node 0's output does not name node 1's refusal and its reason:\n%s", all)
	}
	t.Logf("node 0 failed %v after node 1 exited: %s", took.Round(time.Millisecond), firstLineWith(all, "node 1 refused"))
}

// TestClusterRefusedNodeZero: node 1 waits for node 0's store; node 0 is
// refused at start (a loopback --master-addr in a 2-node job): it serves
// its reason on the rendezvous port for a moment, and node 1 fails with
// it instead of retrying the store for 60 s.
func TestClusterRefusedNodeZero(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	h0, h1 := c.Hosts[0], c.Hosts[1]
	// Count the SYNs node 0's rendezvous port gets: node 1's rank is
	// retrying the store once one has arrived.
	h0.Nft(t, "table inet gotrain_h5syn {\n chain input {\n  type filter hook input priority -10; policy accept;\n  tcp dport 29500 tcp flags syn counter\n }\n}\n")
	t.Cleanup(func() {
		exec.Command("ip", "netns", "exec", h0.NetNS, "nft", "delete", "table", "inet", "gotrain_h5syn").Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out1, code1 := nodeOnHost(t, ctx, h1, byHand(1, h0.Addr, mnistWorker(t)...)...)
	syns := regexp.MustCompile(`packets (\d+)`)
	if !poll(60*time.Second, 50*time.Millisecond, func() bool {
		b, _ := exec.Command("ip", "netns", "exec", h0.NetNS, "nft", "list", "table", "inet", "gotrain_h5syn").Output()
		m := syns.FindSubmatch(b)
		return m != nil && string(m[1]) != "0"
	}) {
		t.Fatalf("node 1's rank never dialed node 0's store:\n%s", out1.String())
	}
	start := time.Now()
	out0, code0 := nodeOnHost(t, ctx, h0, byHand(0, "127.0.0.1", mnistWorker(t)...)...)
	if c := exitWithin(t, "node 0", code0, 30*time.Second, out0); c != 2 {
		t.Fatalf("node 0: exit code %d, want 2 (refused):\n%s", c, out0.String())
	}
	if !strings.Contains(out0.String(), "telling the other nodes why") {
		t.Errorf("node 0 does not say it tells the other nodes:\n%s", out0.String())
	}
	if c := exitWithin(t, "node 1", code1, 30*time.Second, out1); c == 0 {
		t.Fatalf("node 1: exit code 0 after node 0 refused:\n%s", out1.String())
	}
	took := time.Since(start)
	all := out1.String()
	if !strings.Contains(all, "node 0 refused: ") || !strings.Contains(all, "--master-addr 127.0.0.1") {
		t.Fatalf("node 1's output does not name node 0's refusal and its reason:\n%s", all)
	}
	t.Logf("node 1 failed %v after node 0 started: %s", took.Round(time.Millisecond), firstLineWith(all, "node 0 refused"))
}

// TestClusterUnresolvableMaster: a --master-addr that does not resolve
// is one line naming it and the resolver's error, within seconds, on the
// node given it.
func TestClusterUnresolvableMaster(t *testing.T) {
	c := newCluster(t, 1, clustertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	out, code := nodeOnHost(t, ctx, c.Hosts[0], byHand(1, "node-h5-unknown.invalid", mnistWorker(t)...)...)
	if c := exitWithin(t, "node 1", code, 30*time.Second, out); c != 2 {
		t.Fatalf("exit code %d, want 2:\n%s", c, out.String())
	}
	took := time.Since(start)
	line := firstLineWith(out.String(), "node-h5-unknown.invalid")
	if !strings.Contains(line, `--master-addr node-h5-unknown.invalid: cannot resolve host "node-h5-unknown.invalid" (3 tries in`) {
		t.Fatalf("no line names the host and the lookup:\n%s", out.String())
	}
	if took > 20*time.Second {
		t.Errorf("refused after %v", took)
	}
	t.Logf("refused in %v: %s", took.Round(time.Millisecond), line)
}

// firstLineWith is the first line of s containing sub, trimmed.
func firstLineWith(s, sub string) string {
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
