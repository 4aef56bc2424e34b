package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testnet"
)

// TestMasterAddrRefused: a master address that cannot work is one line
// and exit status 2, before any worker starts or anything waits.
func TestMasterAddrRefused(t *testing.T) {
	t.Setenv("GOTRAIN_ALLOW_LOOPBACK", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--master-addr", "node0:29500"}, "gotrain: --master-addr node0:29500: holds a port; give the host and the port apart: --master-addr node0 --master-port 29500"},
		{[]string{"--master-addr", "[::1]:29500"}, "--master-port 29500"},
		{[]string{"--master-addr", "", "--nnodes", "2"}, `gotrain: --master-addr "": must be a host name or IP address`},
		{[]string{"--master-addr", "127.0.0.1", "--nnodes", "2"}, "gotrain: --master-addr 127.0.0.1: is a loopback address in a multi-node job (nnodes 2): the other nodes cannot reach it"},
		{[]string{"--nnodes", "2"}, "--master-addr 127.0.0.1: is a loopback address"}, // the default
		{[]string{"--master-addr", "localhost", "--nnodes", "2", "--node-rank", "1"}, "--master-addr localhost: is a loopback address"},
	} {
		args := append(append([]string{"run"}, tc.args...), "true")
		all, _, code := runGotrain(t, 30*time.Second, args...)
		out := strings.TrimSuffix(all, "\n")
		if code != 2 || strings.Contains(out, "\n") || !strings.Contains(out, tc.want) {
			t.Errorf("gotrain %q: exit %d, %q; want 2 and one line with %q", args, code, all, tc.want)
		}
	}
}

// TestNodeRankMismatch: two nodes both started with --node-rank 0 fail
// together, each saying the rank is taken twice, rather than one waiting
// out the connect timeout: the second fails within a third of it after
// the first (in about half a second).
func TestNodeRankMismatch(t *testing.T) {
	const connectTimeout = 30 * time.Second
	port := strconv.Itoa(testnet.FreePort(t))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout+30*time.Second)
	defer cancel()
	var outs [2]testlog.Buffer
	type exit struct {
		node int
		at   time.Time
		err  error
	}
	exits := make(chan exit, 2)
	for node := range 2 {
		cmd := gotrainCmd(ctx, t, "run", "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1",
			"--master-addr", "127.0.0.1", "--master-port", port, self, "train", "mnist", "--max-steps", "5", "--progress=false")
		cmd.Env = append(cmd.Env, "GOTRAIN_TOKEN=0123456789abcdef0123456789abcdef", "GOTRAIN_ALLOW_LOOPBACK=1", "GOTRAIN_NUM_THREADS=1",
			"GOTRAIN_CONNECT_TIMEOUT="+connectTimeout.String())
		cmd.Stdout, cmd.Stderr = &outs[node], &outs[node]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { err := cmd.Wait(); exits <- exit{node, time.Now(), err} }()
	}
	first, second := <-exits, <-exits
	for _, e := range []exit{first, second} {
		if e.err == nil {
			t.Errorf("node %d succeeded; output:\n%s", e.node, outs[e.node].String())
		} else if !strings.Contains(outs[e.node].String(), "duplicate rank") {
			t.Errorf("node %d (%v) does not say the rank is taken twice; output:\n%s", e.node, e.err, outs[e.node].String())
		}
	}
	if both := outs[0].String() + outs[1].String(); !strings.Contains(both, "did two nodes get the same node rank?") {
		t.Errorf("no node suggests the node ranks collide; output:\n%s", both)
	}
	d := second.at.Sub(first.at)
	t.Logf("the second node failed %v after the first", d.Round(time.Millisecond))
	if d > connectTimeout/3 {
		t.Errorf("the second node failed %v after the first, want well within the %v connect timeout", d, connectTimeout)
	}
}
