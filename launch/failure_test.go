package launch_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
)

func init() { workers["rootcause"] = rootCauseWorker }

// rootCauseWorker acts out a failure and its fallout, by rank's action:
//
//	own      fail with an error of its own, but exit only once every
//	         other rank's process is gone: the fallout reaches the
//	         launcher before the failure
//	peer:R   once rank R has failed (its marker file), fail because of it
//	         (event.PeerLine, exit event.ExitPeer)
//	stop     leave a pid file, then stop itself with SIGSTOP
//	silent:R wait until rank R is stopped, then fail because of its
//	         silence
func rootCauseWorker() int {
	rank := os.Getenv("RANK")
	action := os.Getenv(envAction + "_" + rank)
	dir := os.Getenv(envDir)
	world, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	writePid(filepath.Join(dir, "pid-"+rank))
	switch {
	case action == "own":
		awaitFiles(filepath.Join(dir, "pid-*[0-9]"), world)
		fmt.Fprintln(os.Stderr, "write model.safetensors: no space left on device")
		os.WriteFile(filepath.Join(dir, "failed-"+rank), nil, 0o644)
		for r := range world {
			if strconv.Itoa(r) == rank {
				continue
			}
			awaitFiles(filepath.Join(dir, "done-"+strconv.Itoa(r)), 1)
			pid := readPid(filepath.Join(dir, "pid-"+strconv.Itoa(r)))
			// Gone once the launcher has reaped it: it has seen the exit.
			testproc.Poll(time.Minute, func() bool { return syscall.Kill(pid, 0) != nil })
		}
		return 1
	case strings.HasPrefix(action, "peer:"):
		r := strings.TrimPrefix(action, "peer:")
		awaitFiles(filepath.Join(dir, "failed-"+r), 1)
		fmt.Fprintln(os.Stderr, "distributed: rank "+rank+": allreduce #3: peer lost: peer rank "+r+": left the group")
		b, _ := strconv.Atoi(r)
		fmt.Fprintln(os.Stderr, event.PeerLine(b, 0))
		os.WriteFile(filepath.Join(dir, "done-"+rank), nil, 0o644)
		return event.ExitPeer
	case action == "stop":
		// Stopped again whenever anything continues it: this rank stays
		// stopped until the launcher kills it, never exits 0.
		for {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
	case strings.HasPrefix(action, "silent:"):
		r := strings.TrimPrefix(action, "silent:")
		awaitFiles(filepath.Join(dir, "pid-"+r), 1)
		pid := readPid(filepath.Join(dir, "pid-"+r))
		testproc.Poll(time.Minute, func() bool { return stoppedState(pid) })
		b, _ := strconv.Atoi(r)
		fmt.Fprintln(os.Stderr, event.PeerLine(b, 3*time.Second))
		return event.ExitPeer
	}
	fmt.Fprintf(os.Stderr, "rootcause: no action %q for rank %s\n", action, rank)
	return 2
}

func readPid(path string) int {
	b, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(string(b))
	return pid
}

// stoppedState reports whether /proc says pid is stopped.
func stoppedState(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && len(stat) > i+2 && stat[i+2] == 'T'
}

// rootCauseJob is a job of rootCauseWorker with the actions by rank.
func rootCauseJob(t *testing.T, actions map[int]string) (*job, *[]launch.Failure) {
	j := newJob(t, len(actions), "", actions)
	j.setEnv(testproc.Env("rootcause"))
	var got []launch.Failure
	j.cfg.OnFailure = func(f launch.Failure) { got = append(got, f) }
	return j, &got
}

// TestRootCauseIsTheOwnFailure: rank 0 fails on its own; ranks 1 and 2
// fail because of it and reach the launcher first (rank 0 exits only
// once they are reaped). Every time, the root cause is rank 0 with its
// own error and exit code, blamed by ranks 1 and 2.
func TestRootCauseIsTheOwnFailure(t *testing.T) {
	for i := range 5 {
		j, got := rootCauseJob(t, map[int]string{0: "own", 1: "peer:0", 2: "peer:0"})
		code, err := j.run(t, context.Background())
		if code != 1 || err != nil || len(*got) != 1 {
			t.Fatalf("run %d: Run = %d, %v with %d reports; want 1, nil and one report", i, code, err, len(*got))
		}
		f := (*got)[0]
		if f.Rank != 0 || f.Secondary || f.Cause() != "exit status 1" || !slices.Equal(f.BlamedBy, []int{1, 2}) ||
			!slices.Contains(f.Stderr, "write model.safetensors: no space left on device") {
			t.Fatalf("run %d: root cause %+v (%s); want rank 0's own failure, blamed by ranks 1 and 2", i, f, f.Cause())
		}
		if s := f.String(); !strings.Contains(s, "root cause: rank 0 (local rank 0)") || !strings.Contains(s, "ranks 1 and 2 failed because of it") {
			t.Fatalf("run %d: report:\n%s", i, s)
		}
	}
}

// TestRootCauseStoppedRank: rank 1 is stopped by SIGSTOP and rank 0
// fails because of its silence. The root cause is rank 1, stopped, with
// the silence rank 0 reported; the launcher kills it to end the job.
func TestRootCauseStoppedRank(t *testing.T) {
	j, got := rootCauseJob(t, map[int]string{0: "silent:1", 1: "stop"})
	j.cfg.StopTimeout = 200 * time.Millisecond // SIGTERM does not end a stopped process
	code, err := j.run(t, context.Background())
	if code != 128+int(syscall.SIGKILL) || err != nil || len(*got) != 1 {
		t.Fatalf("Run = %d, %v with %d reports; want %d (the launcher's SIGKILL of rank 1), nil, one report", code, err, len(*got), 128+int(syscall.SIGKILL))
	}
	f := (*got)[0]
	if want := "stopped (SIGSTOP) — no heartbeat for 3s"; f.Rank != 1 || f.Stopped != syscall.SIGSTOP || f.Cause() != want || !slices.Equal(f.BlamedBy, []int{0}) {
		t.Fatalf("root cause rank %d: %q, blamed by %v; want rank 1: %q, blamed by [0]", f.Rank, f.Cause(), f.BlamedBy, want)
	}
	assertGone(t, pidsIn(t, j.dir()))
}

// TestRootCauseSignal: a worker killed by a signal from outside the
// launcher is the root cause, the signal named.
func TestRootCauseSignal(t *testing.T) {
	j := newJob(t, 2, "sleep", nil)
	var got []launch.Failure
	j.cfg.OnFailure = func(f launch.Failure) { got = append(got, f) }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		waitForFiles(t, j.dir(), 2)
		pid := readPid(filepath.Join(j.dir(), "pid-1"))
		syscall.Kill(pid, syscall.SIGKILL)
	}()
	code, err := j.run(t, ctx)
	if code != 128+int(syscall.SIGKILL) || err != nil || len(got) != 1 {
		t.Fatalf("Run = %d, %v with %d reports; want 137, nil, one report", code, err, len(got))
	}
	if f := got[0]; f.Rank != 1 || f.Cause() != "terminated by SIGKILL" || f.Secondary {
		t.Fatalf("root cause rank %d: %q; want rank 1: terminated by SIGKILL", f.Rank, f.Cause())
	}
}
