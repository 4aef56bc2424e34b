package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testnet"
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

// A client holding hundreds of idle, unauthenticated connections to the
// store port (reopening each one the store drops) can neither stop a job
// under `ulimit -n 256` nor flood its log: the two ranks train and
// checkpoint to the end, and the store's warnings about the flood come to
// a few summary lines.
func TestStoreFloodUnderFDLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a while")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	dir := t.TempDir()
	save := filepath.Join(dir, "model.safetensors")
	port := strconv.Itoa(testnet.FreePort(t))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := gotrainCmd(ctx, t, "run", "--nproc-per-node", "2", "--master-port", port, "--", self,
		"train", "mnist", "--max-steps", "300", "--save-every", "10", "--save", save, "--progress=false")
	// The launcher and its workers get a limit of 256 descriptors, soft
	// and hard, as under `ulimit -n 256`.
	cmd.Args = append([]string{"sh", "-c", `ulimit -n 256 && exec "$0" "$@"`, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	var out testlog.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Flood once the job has written its first checkpoint: it is training.
	waitFile(t, save, 90*time.Second, &out)
	floodCtx, stopFlood := context.WithCancel(ctx)
	var flood sync.WaitGroup
	var opened atomic.Int64
	for range 500 {
		flood.Go(func() {
			var d net.Dialer
			for floodCtx.Err() == nil {
				c, err := d.DialContext(floodCtx, "tcp", "127.0.0.1:"+port)
				if err != nil {
					select {
					case <-floodCtx.Done():
					case <-time.After(time.Second):
					}
					continue
				}
				opened.Add(1)
				stop := context.AfterFunc(floodCtx, func() { c.Close() })
				_, _ = c.Read(make([]byte, 1)) // idle until the store drops it
				stop()
				c.Close()
				select {
				case <-floodCtx.Done():
				case <-time.After(time.Second):
				}
			}
		})
	}
	err = <-exited
	stopFlood()
	flood.Wait()
	if err != nil {
		t.Fatalf("the job failed under the flood: %v\noutput:\n%s", err, out.String())
	}
	if opened.Load() < 500 {
		t.Fatalf("the flood opened only %d connections", opened.Load())
	}
	var warned []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") {
			warned = append(warned, l)
		}
	}
	t.Logf("%d connections opened; %d warning lines:\n%s", opened.Load(), len(warned), strings.Join(warned, "\n"))
	if len(warned) > 10 {
		t.Fatalf("%d warning lines for the flood; want a few summaries:\n%s", len(warned), strings.Join(warned, "\n"))
	}
	b, err := os.ReadFile(save)
	if err != nil || len(b) == 0 {
		t.Fatalf("checkpoint %s: %d bytes, %v", save, len(b), err)
	}
}
