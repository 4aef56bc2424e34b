package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testproc"
)

// rootCauseRun is a 2-worker MNIST job that checkpoints into dir every 10
// steps and runs until the test makes it fail.
type rootCauseRun struct {
	cmd  *exec.Cmd
	out  testlog.Buffer
	dir  string
	done chan struct{}
}

func startRootCauseRun(ctx context.Context, t *testing.T, env ...string) *rootCauseRun {
	t.Helper()
	r := &rootCauseRun{dir: filepath.Join(t.TempDir(), "ckpt"), done: make(chan struct{})}
	if err := os.Mkdir(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.cmd = gotrainCmd(ctx, t, "train", "mnist", "--nproc-per-node", "2", "--epochs", "1000", "--progress=false",
		"--save", filepath.Join(r.dir, "m.safetensors"), "--save-every", "10")
	r.cmd.Env = append(r.cmd.Env, env...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		<-r.done
	})
	// Training runs once rank 0 has checkpointed.
	if !testproc.Poll(time.Minute, func() bool {
		_, err := os.Stat(filepath.Join(r.dir, "m.safetensors"))
		return err == nil
	}) {
		t.Fatalf("no checkpoint within a minute; output:\n%s", r.out.String())
	}
	return r
}

// wait waits for the job to end and returns its exit code and its root
// cause report (from "launch: job failed" on).
func (r *rootCauseRun) wait(t *testing.T) (int, string) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the job did not end; output:\n%s", r.out.String())
	}
	out := r.out.String()
	i := strings.LastIndex(out, "launch: job failed; root cause:")
	if i < 0 {
		t.Fatalf("no root cause reported (exit %d); output:\n%s", r.cmd.ProcessState.ExitCode(), out)
	}
	return r.cmd.ProcessState.ExitCode(), out[i:]
}

// workerPID is the pid of the launcher's worker of rank, found among its
// children.
func (r *rootCauseRun) workerPID(t *testing.T, rank int) int {
	t.Helper()
	ppid := r.cmd.Process.Pid
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			continue
		}
		if f := strings.Fields(string(stat[i+1:])); len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if bytes.Contains(append([]byte{0}, env...), []byte("\x00RANK="+strconv.Itoa(rank)+"\x00")) {
			return pid
		}
	}
	t.Fatalf("no worker of rank %d among pid %d's children", rank, ppid)
	return 0
}

func wantAll(t *testing.T, what, report string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(report, w) {
			t.Errorf("%s: the report does not say %q:\n%s", what, w, report)
		}
	}
}

// TestRootCauseFailedSave: rank 0's checkpoint cannot be written (its
// directory is gone); rank 1 fails because of it, and often reaches the
// launcher first. The root cause is rank 0's own error, every time.
func TestRootCauseFailedSave(t *testing.T) {
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		r := startRootCauseRun(ctx, t)
		// Moved away in one step: a save under way may be writing into
		// it, so removing it could race with that save's files.
		if err := os.Rename(r.dir, r.dir+".gone"); err != nil {
			t.Fatal(err)
		}
		code, report := r.wait(t)
		cancel()
		if code != 1 {
			t.Errorf("run %d: exit code %d, want rank 0's 1", i, code)
		}
		wantAll(t, "run "+strconv.Itoa(i), report, "root cause: rank 0 (local rank 0)", ": exit status 1\n",
			"no such file or directory")
		if t.Failed() {
			t.Fatalf("output:\n%s", r.out.String())
		}
	}
}

// TestRootCauseStoppedWorker: rank 1 is stopped with SIGSTOP; rank 0
// fails when its heartbeats stop. The root cause is rank 1, stopped, and
// the job exits with the SIGKILL that ended it.
func TestRootCauseStoppedWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := startRootCauseRun(ctx, t, "GOTRAIN_HEARTBEAT_TIMEOUT=2s")
	pid := r.workerPID(t, 1)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	code, report := r.wait(t)
	if code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code %d, want %d", code, 128+int(syscall.SIGKILL))
	}
	wantAll(t, "SIGSTOP", report, "root cause: rank 1 (local rank 1)", "pid "+strconv.Itoa(pid)+": stopped (SIGSTOP) — no heartbeat for ",
		"rank 0 failed because of it")
	if t.Failed() {
		t.Logf("output:\n%s", r.out.String())
	}
}

// TestRootCauseTerminatedWorker: rank 1 gets SIGTERM from outside the
// launcher. It says so, and the root cause names the signal.
func TestRootCauseTerminatedWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := startRootCauseRun(ctx, t)
	pid := r.workerPID(t, 1)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatal(err)
	}
	code, report := r.wait(t)
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	wantAll(t, "SIGTERM", report, "root cause: rank 1 (local rank 1)", "pid "+strconv.Itoa(pid)+": terminated by SIGTERM\n",
		"gotrain: terminated by SIGTERM: ")
	if t.Failed() {
		t.Logf("output:\n%s", r.out.String())
	}
}
