package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/testing/clustertest"
)

// TestClusterLinkCutRootCause: host 1's link goes down mid-training.
// The job ends with a root-cause block naming node 1, its host and its
// rank, unreachable: not rank 0, which the launcher stopped, or which
// failed because of rank 1. Twice: with the peers' silence bound at its
// default (15 s), past the 5 s in which the launcher gives up on host 1's
// agent, and at 3 s, so that rank 0 fails first, blaming rank 1.
func TestClusterLinkCutRootCause(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	for _, env := range [][]string{nil, {"GOTRAIN_HEARTBEAT_TIMEOUT=3s"}} {
		_, out, code, _ := startTrainingEnv(t, c, env, 1)
		cut := time.Now()
		c.Hosts[1].LinkDown(t)
		select {
		case got := <-code:
			t.Logf("%v: launcher exited with %d, %v after the cut", env, got, time.Since(cut).Round(time.Millisecond))
			if got != 1 {
				t.Errorf("%v: launcher exit code %d, want 1", env, got)
			}
		case <-time.After(40 * time.Second):
			t.Fatalf("%v: launcher still running 40 s after the cut", env)
		}
		s := out.String()
		i := strings.LastIndex(s, "launch: job failed; root cause: ")
		if i < 0 {
			t.Fatalf("%v: no root-cause block:\n%s", env, s)
		}
		t.Logf("%v:\n%s", env, s[i:])
		want := fmt.Sprintf("launch: job failed; root cause: node 1 (host %s, rank 1) unreachable: host %s: ", c.Hosts[1].Addr, c.Hosts[1].Addr)
		if !strings.HasPrefix(s[i:], want) {
			t.Errorf("%v: root cause:\n%s\nwant it to start %q", env, s[i:], want)
		}
		c.Hosts[1].LinkUp(t)
	}
}
