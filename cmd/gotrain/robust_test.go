package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
)

// `gotrain run ... | head -1`: once the reader of stdout is gone, the
// launcher drops the workers' stdout lines and the job runs to its end;
// the launcher exits 0 instead of dying of SIGPIPE and taking the job
// with it.
func TestRunSurvivesClosedStdout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	done := filepath.Join(dir, "done")
	script := `echo first; sleep 0.5; i=0; while [ $i -lt 200 ]; do echo line $i; i=$((i+1)); done; sleep 0.5; echo ok > ` + done
	cmd := gotrainCmd(ctx, t, "run", "--nproc-per-node", "2", "--", "sh", "-c", script)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testlog.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first line %q, %v; stderr:\n%s", line, err, stderr.String())
	}
	stdout.Close() // as head does after its line
	err = cmd.Wait()
	if err != nil {
		t.Fatalf("gotrain run with stdout closed: %v; want exit 0; stderr:\n%s", err, stderr.String())
	}
	if _, err := os.Stat(done); err != nil {
		t.Fatalf("the job did not finish: %v; stderr:\n%s", err, stderr.String())
	}
}

// A SIGKILLed launcher leaves nothing behind: its workers die with it and
// the children they started (here a shell's background sleep, in the
// worker's process group) are stopped by the launcher's reaper, all within
// 5 s.
func TestKilledLauncherLeavesNoProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	script := `sleep 60 & echo $! > ` + filepath.Join(dir, "child.$RANK") + `; echo $$ > ` + filepath.Join(dir, "worker.$RANK") + `; wait`
	cmd := gotrainCmd(ctx, t, "run", "--nproc-per-node", "2", "--", "sh", "-c", script)
	var out testlog.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, name := range []string{"worker.0", "child.0", "worker.1", "child.1"} {
		path := filepath.Join(dir, name)
		waitFile(t, path, 30*time.Second, &out)
		var pid int
		for deadline := time.Now().Add(5 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			b, _ := os.ReadFile(path)
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if pid <= 1 {
			t.Fatalf("%s: no pid; output:\n%s", name, out.String())
		}
		pids = append(pids, pid)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			if processLive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for {
		var alive []int
		for _, pid := range pids {
			if processLive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			t.Logf("all of %v gone %v after the launcher's SIGKILL", pids, time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("pids %v (of workers and children %v) alive 5 s after the launcher's SIGKILL; output:\n%s", alive, pids, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processLive reports whether pid exists and is not a zombie.
func processLive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}
