package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestTrainKilledLeavesNoTempDir: `gotrain train` killed by SIGKILL, with
// its workers running, leaves nothing in the temporary directory once its
// reaper has stopped the workers.
func TestTrainKilledLeavesNoTempDir(t *testing.T) {
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := gotrainCmd(ctx, t, "train", "mnist", "--nproc-per-node", "2", "--epochs", "1000", "--progress=false")
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	workers := []int{workerPID(t, cmd.Process.Pid, 0, time.Minute), workerPID(t, cmd.Process.Pid, 1, time.Minute)}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	gone := poll(time.Minute, 10*time.Millisecond, func() bool {
		for _, pid := range workers {
			if syscall.Kill(pid, 0) == nil {
				return false
			}
		}
		return true
	})
	if !gone {
		t.Fatalf("workers %v outlived their killed launcher", workers)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in the temporary directory: %s", e.Name())
	}
}
