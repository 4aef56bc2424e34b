//go:build linux

package launch_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
)

// Workers of the shared-memory cleanup tests: "shm-hold" creates a
// /dev/shm file, as a rank setting up its group does, records its path
// and pid in SHM_TEST_DIR/path-<rank>, then acts out SHM_TEST_MODE:
// "hold" blocks until killed, "kill" SIGKILLs itself once every rank of
// the node has recorded its file. "shm-launcher" is a launcher of one
// "hold" worker in job SHM_TEST_JOB, for a test to SIGKILL.
const (
	envShmDir  = "SHM_TEST_DIR"
	envShmMode = "SHM_TEST_MODE"
	envShmJob  = "SHM_TEST_JOB"
)

func init() {
	workers["shm-hold"] = shmHoldWorker
	workers["shm-launcher"] = func() int {
		code, err := launch.Run(context.Background(), launch.Config{
			Program: os.Args[0], Env: testproc.Environ("shm-hold"), NProcPerNode: 1,
			Standalone: true, RunID: os.Getenv(envShmJob),
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		return code
	}
}

func shmHoldWorker() int {
	rank, dir := os.Getenv("RANK"), os.Getenv(envShmDir)
	path, _, err := shm.Create("test", 8192)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shm-hold:", err)
		return 2
	}
	rec := filepath.Join(dir, "path-"+rank)
	os.WriteFile(rec+".tmp", []byte(path+"\n"+strconv.Itoa(os.Getpid())), 0o644)
	os.Rename(rec+".tmp", rec)
	if os.Getenv(envShmMode) == "kill" {
		want, _ := strconv.Atoi(os.Getenv("LOCAL_WORLD_SIZE"))
		awaitFiles(filepath.Join(dir, "path-[0-9]"), want)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	time.Sleep(time.Minute) // held until killed; the minute ends an orphan
	return 1
}

// shmTestJob is a run id of this test's own, so that it looks at no other
// test's or user's files; files it leaves are removed when it ends.
func shmTestJob(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		t.Skip("no /dev/shm")
	}
	job := fmt.Sprintf("lt%d_%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		left, _ := filepath.Glob(shm.FilePattern(job))
		for _, p := range left {
			os.Remove(p)
		}
	})
	return job
}

// recorded reads the path and pid a shm-hold worker recorded, waiting up
// to limit for it.
func recorded(t *testing.T, dir, rank string, limit time.Duration) (path string, pid int) {
	t.Helper()
	var b []byte
	if !testproc.Poll(limit, func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(dir, "path-"+rank))
		return err == nil
	}) {
		t.Fatalf("rank %s recorded no shared-memory file in %v", rank, limit)
	}
	path, n, _ := strings.Cut(string(b), "\n")
	pid, _ = strconv.Atoi(n)
	return path, pid
}

// TestKilledWorkerLeavesNoShmFile: a worker SIGKILLed while it holds a
// file it has not unlinked yet, and one stopped by the launcher, leave
// their files; the launcher removes them when the job ends.
func TestKilledWorkerLeavesNoShmFile(t *testing.T) {
	job := shmTestJob(t)
	dir := t.TempDir()
	var out, log bytes.Buffer
	cfg := launch.Config{
		Program:         os.Args[0],
		Env:             append(testproc.Environ("shm-hold"), envShmDir+"="+dir, envShmMode+"=kill"),
		NProcPerNode:    2,
		Standalone:      true,
		RunID:           job,
		MonitorInterval: 10 * time.Millisecond,
		StopTimeout:     2 * time.Second,
		Stdout:          &out,
		Stderr:          &out,
		Logger:          slog.New(slog.NewTextHandler(&log, nil)),
	}
	code, err := launch.Run(context.Background(), cfg)
	if err != nil || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("Run = %d, %v; want %d (a worker SIGKILLed itself)\noutput:\n%s\nlog:\n%s", code, err, 128+int(syscall.SIGKILL), out.String(), log.String())
	}
	for _, rank := range []string{"0", "1"} {
		path, _ := recorded(t, dir, rank, 0)
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("rank %s's %s is left after the job (%v)\nlog:\n%s", rank, path, err, log.String())
		}
	}
	if left, _ := filepath.Glob(shm.FilePattern(job)); len(left) > 0 {
		t.Errorf("files of the job left in /dev/shm: %v", left)
	}
}

// TestKilledLauncherShmFileRemovedByNextRun: a launcher SIGKILLed with its
// worker (the kernel kills the worker when its launcher dies) cannot clean
// up; the file stays until the next launcher starts, which removes it.
func TestKilledLauncherShmFileRemovedByNextRun(t *testing.T) {
	job := shmTestJob(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := testproc.Command(ctx, t, "shm-launcher")
	l.Env = append(l.Env, envShmDir+"="+dir, envShmMode+"=hold", envShmJob+"="+job)
	var lout bytes.Buffer
	l.Stdout, l.Stderr = &lout, &lout
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	path, pid := recorded(t, dir, "0", 20*time.Second)
	if _, err := os.Stat(path); err != nil {
		l.Process.Kill()
		l.Wait()
		t.Fatalf("the worker's file: %v", err)
	}
	l.Process.Signal(syscall.SIGKILL)
	l.Wait()
	waitGone(t, pid)
	// The file is left; another test process's first group setup may have
	// removed it already, which is the same cleanup.
	if left, _ := filepath.Glob(shm.FilePattern(job)); len(left) > 1 || len(left) == 1 && left[0] != path {
		t.Fatalf("files of the killed job: %v, want at most %s", left, path)
	}

	next := launch.Config{
		Program:      os.Args[0],
		Env:          append(testproc.Environ("worker"), envAction+"=exit:0"),
		NProcPerNode: 1,
		Standalone:   true,
		RunID:        job + "_next",
		Stdout:       &lout,
		Stderr:       &lout,
		Logger:       slog.New(slog.NewTextHandler(&lout, nil)),
	}
	if code, err := launch.Run(ctx, next); code != 0 || err != nil {
		t.Fatalf("the next run: %d, %v\n%s", code, err, lout.String())
	}
	if left, _ := filepath.Glob(shm.FilePattern(job)); len(left) > 0 {
		t.Errorf("after the next run started, the killed job still has %v\n%s", left, lout.String())
	}
}

// waitGone waits until process pid has exited (or is a zombie, which the
// test binary, not its parent, cannot reap).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	gone := func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
				return true
			}
		}
		return false
	}
	if !testproc.Poll(10*time.Second, gone) {
		t.Fatalf("worker %d still runs after its launcher was killed", pid)
	}
}
