package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	// Each worker prints its first line, then waits on its FIFO until the
	// test has closed stdout, so that its other lines come after.
	for r := range 2 {
		if err := unix.Mkfifo(filepath.Join(dir, "go."+strconv.Itoa(r)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := `echo first; read _ < ` + dir + `/go.$RANK; i=0; while [ $i -lt 200 ]; do echo line $i; i=$((i+1)); done; echo ok > ` + done
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
	for r := range 2 {
		// Opened for reading and writing, so that opening does not wait
		// for the worker; the line stays in the FIFO until it reads it.
		f, err := os.OpenFile(filepath.Join(dir, "go."+strconv.Itoa(r)), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("go\n"); err != nil {
			t.Fatal(err)
		}
	}
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
// a few times the grace the reaper gives them between SIGTERM and SIGKILL.
func TestKilledLauncherLeavesNoProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const grace = time.Second
	cmd := gotrainCmd(ctx, t, "run", "--nproc-per-node", "2", "--stop-timeout", grace.String(), "--",
		"sh", "-c", `sleep 60 & echo "pids $$ $!"; wait`)
	out := newOutput(nil)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pidsRe := regexp.MustCompile(`(?m)^\[rank\d\]: pids (\d+) (\d+)\n`) // whole lines
	if !out.waitFor(30*time.Second, func(s string) bool { return len(pidsRe.FindAllString(s, -1)) == 2 }) {
		t.Fatalf("the workers did not start within 30 s; output:\n%s", out.String())
	}
	var pids []int // each worker's, then its child's
	for _, m := range pidsRe.FindAllStringSubmatch(out.String(), -1) {
		for _, p := range m[1:] {
			pid, _ := strconv.Atoi(p)
			pids = append(pids, pid)
		}
	}
	procs := watchExits(t, pids...) // while they run: their pids are theirs
	t.Cleanup(func() {
		for _, pid := range procs.wait(0) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	limit := 5 * grace
	if alive := procs.wait(limit); len(alive) > 0 {
		t.Fatalf("pids %v (of workers and children %v) alive %v after the launcher's SIGKILL; output:\n%s", alive, pids, limit, out.String())
	}
	t.Logf("all of %v gone %v after the launcher's SIGKILL", pids, time.Since(killed).Round(time.Millisecond))
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
