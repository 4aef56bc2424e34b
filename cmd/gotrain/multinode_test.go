package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testnet"
)

// TestTrainTwoNodes runs the job as two nodes of one worker each, started
// the way a user starts them on two hosts (one `gotrain run` per node with
// --nnodes 2 and its own --node-rank, a shared token), with the arena off
// so the ranks talk over TCP as they would between hosts. The model it
// trains must be bitwise the one the same job trains as two local workers.
func TestTrainTwoNodes(t *testing.T) {
	dir := t.TempDir()
	job := []string{"train", "mnist", "--max-steps", "20", "--progress=false"}

	local := filepath.Join(dir, "local.safetensors")
	all, _, code := runGotrain(t, 60*time.Second, append(job, "--nproc-per-node", "2", "--save", local)...)
	if code != 0 {
		t.Fatalf("two local workers: exit code %d; output:\n%s", code, all)
	}

	port := strconv.Itoa(testnet.FreePort(t))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	twoNodes := filepath.Join(dir, "nodes.safetensors")
	var outs [2]testlog.Buffer
	var stdout0 testlog.Buffer
	errs := make(chan error, 2)
	for node := range 2 {
		cmd := gotrainCmd(ctx, t, append([]string{"run", "--nnodes", "2", "--node-rank", strconv.Itoa(node),
			"--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port, self},
			append(job, "--save", twoNodes)...)...)
		cmd.Env = append(cmd.Env, "GOTRAIN_TOKEN=0123456789abcdef0123456789abcdef", "GOTRAIN_SHM=0", "GOTRAIN_NUM_THREADS=1",
			"GOTRAIN_ALLOW_LOOPBACK=1") // both "nodes" are this host
		cmd.Stdout, cmd.Stderr = &outs[node], &outs[node]
		if node == 0 {
			cmd.Stdout = &stdout0
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { errs <- cmd.Wait() }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a node failed: %v\nnode 0:\n%s%s\nnode 1:\n%s", err, stdout0.String(), outs[0].String(), outs[1].String())
		}
	}
	kv := summary(t, stdout0.String())
	if kv["world"] != "2" || kv["steps"] != "20" {
		t.Fatalf("node 0's summary %v: want world=2 steps=20", kv)
	}
	want, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(twoNodes)
	if err != nil {
		t.Fatalf("rank 0 on node 0 saved no model: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("two nodes over TCP trained other weights than two local workers over shared memory")
	}
}
