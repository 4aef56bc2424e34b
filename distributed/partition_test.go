package distributed

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
)

// netnsPair is two network namespaces joined by a veth pair, as two hosts
// on one link: namespace i has address addrs[i].
type netnsPair struct {
	ns, dev [2]string
	addrs   [2]string
}

// newNetnsPair creates the namespaces, or skips the test when this
// process may not (not root, no ip), unless GOTRAIN_REQUIRE_ENGINES=1. It
// deletes them when the test ends.
func newNetnsPair(t *testing.T) *netnsPair {
	t.Helper()
	need := func(why string) {
		if os.Getenv("GOTRAIN_REQUIRE_ENGINES") == "1" {
			t.Fatalf("network namespaces required: %s", why)
		}
		t.Skipf("no network namespaces: %s", why)
	}
	if os.Geteuid() != 0 {
		need("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		need("no ip command")
	}
	tag := fmt.Sprintf("gtlv%d", os.Getpid()%100000)
	n := &netnsPair{
		ns:    [2]string{tag + "a", tag + "b"},
		dev:   [2]string{tag + "va", tag + "vb"},
		addrs: [2]string{"10.231.77.1", "10.231.77.2"},
	}
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		for _, ns := range n.ns {
			ip("netns", "del", ns) // takes its veth end, and so the pair, along
		}
	})
	steps := [][]string{
		{"netns", "add", n.ns[0]}, {"netns", "add", n.ns[1]},
		{"link", "add", n.dev[0], "type", "veth", "peer", "name", n.dev[1]},
	}
	for i := range 2 {
		steps = append(steps,
			[]string{"link", "set", n.dev[i], "netns", n.ns[i]},
			[]string{"-n", n.ns[i], "addr", "add", n.addrs[i] + "/24", "dev", n.dev[i]},
			[]string{"-n", n.ns[i], "link", "set", n.dev[i], "up"},
			[]string{"-n", n.ns[i], "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			need(err.Error())
		}
	}
	return n
}

// cut takes namespace i's end of the link down: packets stop both ways,
// and no connection is reset, as when a cable is pulled.
func (n *netnsPair) cut(t *testing.T, i int) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", n.ns[i], "link", "set", n.dev[i], "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set down: %v: %s", err, out)
	}
}

// drop makes namespace i's firewall drop every packet in and out, as a
// firewall rule or a silent network would: nothing is refused or reset.
// It skips (or fails with GOTRAIN_REQUIRE_ENGINES=1) without nft.
func (n *netnsPair) drop(t *testing.T, i int) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		if os.Getenv("GOTRAIN_REQUIRE_ENGINES") == "1" {
			t.Fatal("nft required for the firewall partition")
		}
		t.Skip("no nft command")
	}
	rules := "table inet gotrain_test {\n" +
		"  chain in { type filter hook input priority 0; policy drop; }\n" +
		"  chain out { type filter hook output priority 0; policy drop; }\n" +
		"}\n"
	cmd := exec.Command("ip", "netns", "exec", n.ns[i], "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
}

// nsProc is a rank running in a namespace, and its output lines.
type nsProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []testproc.Line
	done  chan struct{}
}

// waitLine waits up to timeout for a line starting with prefix.
func (p *nsProc) waitLine(prefix string, timeout time.Duration) (testproc.Line, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.HasPrefix(l.Text, prefix) {
				p.mu.Unlock()
				return l, true
			}
		}
		p.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	return testproc.Line{}, false
}

func (p *nsProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

// startInNetns runs worker as rank r of world 2 in namespace n.ns[r], rank
// 0 serving the store at its namespace's address.
func startInNetns(t *testing.T, n *netnsPair, worker string, r int, env ...string) *nsProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.ns[r], exe, "-test.run=^$")
	cmd.Env = append(testproc.Environ(worker), "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=1",
		fmt.Sprintf("RANK=%d", r), "LOCAL_RANK=0", "MASTER_ADDR="+n.addrs[0], "MASTER_PORT=29517",
		"GOTRAIN_LISTEN_HOST="+n.addrs[r], "GOTRAIN_TOKEN=proc-test", "GOTRAIN_RUN_ID="+t.Name())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &nsProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, testproc.Line{At: time.Now(), Text: s.Text()})
			p.mu.Unlock()
		}
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("rank in %s:\n%s", cmd.Args[3], p.output())
		}
	})
	return p
}

// TestProcessPartition: two ranks in two network namespaces allreduce
// over TCP; the link between them goes down, or a firewall starts dropping
// every packet (no reset, no EOF either way). Both ranks fail within the
// heartbeat timeout (2 s here) plus a margin, naming the other, long
// before the operation timeout.
func TestProcessPartition(t *testing.T) {
	for _, tc := range []struct {
		name  string
		split func(n *netnsPair, t *testing.T, i int)
	}{
		{"link down", (*netnsPair).cut},
		{"nft drop", (*netnsPair).drop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNetnsPair(t)
			ps := [2]*nsProc{}
			for r := range 2 {
				ps[r] = startInNetns(t, n, "freeze", r, "GOTRAIN_SHM=0", "GOTRAIN_HEARTBEAT_TIMEOUT=2s")
			}
			for r, p := range ps {
				if _, ok := p.waitLine("ready", 30*time.Second); !ok {
					t.Fatalf("rank %d never finished its first allreduce", r)
				}
			}
			cut := time.Now()
			tc.split(n, t, 1)
			for r, p := range ps {
				l, ok := p.waitLine("failed:", 70*time.Second)
				if !ok {
					t.Fatalf("rank %d did not fail after the partition", r)
				}
				d := l.At.Sub(cut)
				t.Logf("rank %d, %v after the partition: %s", r, d.Round(time.Millisecond), l.Text)
				if d > 6*time.Second {
					t.Errorf("rank %d failed %v after the partition, want ≤ 6 s", r, d)
				}
				if peer := 1 - r; !strings.Contains(l.Text, fmt.Sprintf("peer rank %d (", peer)) {
					t.Errorf("rank %d's error does not name rank %d: %s", r, peer, l.Text)
				}
			}
		})
	}
}
