package distributed

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// newNetnsPair makes two hosts (network namespaces on a bridge, no
// sshd) for ranks to run on, or skips the test when this process may not
// (not root, no ip), unless GOTRAIN_REQUIRE_ENGINES=1. They are removed
// when the test ends.
func newNetnsPair(t *testing.T) *clustertest.Cluster {
	t.Helper()
	return clustertest.New(t, clustertest.Options{Hosts: 2, NoSSH: true})
}

// startInNetns runs worker as rank r of world 2 on host r of n, rank 0
// serving the store at its host's address.
func startInNetns(t *testing.T, n *clustertest.Cluster, worker string, r int, env ...string) *testproc.Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := n.Hosts[r]
	cmd := h.Command(context.Background(), exe, "-test.run=^$")
	cmd.Env = append(testproc.Environ(worker), "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=1",
		fmt.Sprintf("RANK=%d", r), "LOCAL_RANK=0", "MASTER_ADDR="+n.Hosts[0].Addr, "MASTER_PORT=29517",
		"GOTRAIN_LISTEN_HOST="+h.Addr, "GOTRAIN_TOKEN=proc-test", "GOTRAIN_RUN_ID="+t.Name())
	cmd.Env = append(cmd.Env, env...)
	return testproc.Watch(t, cmd, r)
}

// TestProcessPartition: two ranks in two network namespaces allreduce
// over TCP; the link between them goes down, or a firewall starts dropping
// every packet (no reset, no EOF either way). Both ranks fail within the
// heartbeat timeout (2 s here) plus a margin, naming the other, long
// before the operation timeout.
func TestProcessPartition(t *testing.T) {
	for _, tc := range []struct {
		name  string
		split func(h *clustertest.Host, t testing.TB)
	}{
		{"link down", (*clustertest.Host).LinkDown},
		{"nft drop", (*clustertest.Host).DropAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNetnsPair(t)
			ps := [2]*testproc.Proc{}
			for r := range 2 {
				ps[r] = startInNetns(t, n, "freeze", r, "GOTRAIN_SHM=0", "GOTRAIN_HEARTBEAT_TIMEOUT=2s")
			}
			for r, p := range ps {
				if _, ok := p.WaitLine("ready", 30*time.Second); !ok {
					t.Fatalf("rank %d never finished its first allreduce", r)
				}
			}
			cut := time.Now()
			tc.split(n.Hosts[1], t)
			for r, p := range ps {
				l, ok := p.WaitLine("failed:", 70*time.Second)
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
