package distributed

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// TestRendezvousUnreachablePeer: rank 2 runs on another "host" (a network
// namespace) and cannot reach rank 1, which advertises an address only
// its own host can dial. Rank 2 reports it after its reachability bound,
// and every rank fails within 2 s of that, naming the peer.
func TestRendezvousUnreachablePeer(t *testing.T) {
	// One host; this process is on the bridge at c.LocalAddr.
	c := clustertest.New(t, clustertest.Options{Hosts: 1, NoSSH: true})
	hostIP := c.LocalAddr
	port := strconv.Itoa(testnet.FreePort(t))
	env := []string{"GOTRAIN_TOKEN=proc-test", "GOTRAIN_RUN_ID=" + t.Name(), "GOTRAIN_CONNECT_TIMEOUT=30s",
		"WORLD_SIZE=3", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=" + hostIP, "MASTER_PORT=" + port, "GOTRAIN_SHM=0"}
	ranks := testproc.Start(t, "join", 2, testproc.Options{Env: env,
		RankEnv: func(r int) []string {
			if r == 1 {
				return []string{"GOTRAIN_LISTEN_HOST=127.0.0.1"}
			}
			return nil
		}})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	remote := c.Hosts[0].Command(context.Background(), exe, "-test.run=^$")
	remote.Env = append(append(testproc.Environ("join"), env...), "RANK=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1")
	var out bytes.Buffer
	remote.Stdout, remote.Stderr = &out, &out
	if err := remote.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remote.Process.Kill(); remote.Wait() })
	done := make(chan time.Time, 1)
	go func() { remote.Wait(); done <- time.Now() }()
	var failed time.Time
	select {
	case failed = <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("rank 2 did not fail")
	}
	t.Logf("rank 2: %s", strings.TrimSpace(out.String()))
	if !strings.Contains(out.String(), "init error:") || !strings.Contains(out.String(), "cannot reach rank 1 at 127.0.0.1:") {
		t.Errorf("rank 2 does not say it cannot reach rank 1: %s", out.String())
	}
	for _, p := range ranks.Procs() {
		l, ok := p.WaitLine("init error:", 10*time.Second)
		if !ok {
			t.Fatalf("rank %d did not fail", p.Rank)
		}
		t.Logf("rank %d, %v after rank 2: %s", p.Rank, l.At.Sub(failed).Round(time.Millisecond), l.Text)
		if !strings.Contains(l.Text, "cannot reach rank 1") {
			t.Errorf("rank %d's error does not name the unreachable peer: %s", p.Rank, l.Text)
		}
		if d := l.At.Sub(failed); d > 2*time.Second {
			t.Errorf("rank %d failed %v after rank 2, want ≤ 2 s", p.Rank, d)
		}
	}
	ranks.Wait()
}
