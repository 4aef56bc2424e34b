package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Multi-process tests re-run this test binary as workers: with workerEnv
// set, TestMain runs a worker instead of the tests.
const workerEnv = "GOTRAIN_STORE_TEST_WORKER"

func TestMain(m *testing.M) {
	if role := os.Getenv(workerEnv); role != "" {
		if err := runWorker(role); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// runWorker is one worker process. Roles:
//
//	rank|<tcp or file>|<addr or path>|<rank>|<world>  rendezvous through the store
//	server                                           serve a store, print its address, wait to be killed
func runWorker(role string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if role == "server" {
		s, err := Listen("127.0.0.1:0", testToken)
		if err != nil {
			return err
		}
		fmt.Println(s.Addr())
		select {} // until SIGKILL
	}
	fields := strings.Split(role, "|")
	if len(fields) != 5 || fields[0] != "rank" {
		return fmt.Errorf("bad role %q", role)
	}
	kind, where := fields[1], fields[2]
	rank, err1 := strconv.Atoi(fields[3])
	world, err2 := strconv.Atoi(fields[4])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("bad role %q: %w", role, err)
	}
	var s Store
	var err error
	if kind == "tcp" {
		s, err = Dial(ctx, where, testToken)
	} else {
		s, err = NewFile(where)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	for range 20 {
		if _, err := s.Add(ctx, "counter", 1); err != nil {
			return err
		}
	}
	if err := s.Set(ctx, fmt.Sprint("addr/", rank), []byte(fmt.Sprint("host-", rank))); err != nil {
		return err
	}
	for r := range world {
		v, err := s.Get(ctx, fmt.Sprint("addr/", r))
		if err != nil {
			return err
		}
		if string(v) != fmt.Sprint("host-", r) {
			return fmt.Errorf("addr/%d = %q", r, v)
		}
	}
	// Barrier: nobody leaves (and, for the file store, removes the file)
	// before everyone has counted.
	if _, err := s.Add(ctx, "done", 1); err != nil {
		return err
	}
	if err := s.Wait(ctx, "release"); err != nil {
		return err
	}
	return nil
}

// startWorkers runs n workers with the given roles and returns a function
// that waits for them all, reporting each failure with the worker's output.
func startWorkers(t *testing.T, roles []string) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, len(roles))
	outs := make([]*strings.Builder, len(roles))
	for i, role := range roles {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+role)
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Wait()
			if errs[i] != nil {
				cancel() // one failed: stop the others
			}
		}()
	}
	return func() {
		wg.Wait()
		cancel()
		for i, err := range errs {
			if err != nil {
				t.Errorf("worker %d (%s): %v\n%s", i, roles[i], err, outs[i])
			}
		}
	}
}

func testProcesses(t *testing.T, kind, where string, s Store) {
	const world = 3
	roles := make([]string, world)
	for r := range roles {
		roles[r] = fmt.Sprintf("rank|%s|%s|%d|%d", kind, where, r, world)
	}
	wait := startWorkers(t, roles)
	ctx := ctxFor(t, 30*time.Second)
	for {
		v, err := s.Get(ctx, "done")
		if err != nil {
			t.Fatal(err)
		}
		if string(v) == fmt.Sprint(world) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustGet(t, s, "counter", fmt.Sprint(world*20))
	mustSet(t, s, "release", "")
	wait()
}

func TestTCPProcesses(t *testing.T) {
	srv := startServer(t)
	testProcesses(t, "tcp", srv.Addr().String(), dial(t, srv))
}

func TestFileProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	f := openFile(t, path)
	testProcesses(t, "file", path, f)
}

// A store server killed with SIGKILL makes the clients' pending calls fail
// promptly, naming the server.
func TestTCPServerKilled(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"=server")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("server worker printed no address: %v", err)
	}
	addr = strings.TrimSpace(addr)
	c, err := Dial(ctxFor(t, 10*time.Second), addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Get(ctxFor(t, 30*time.Second), "never")
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cmd.Process.Kill()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrConnLost) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("Get after the server died = %v; want ErrConnLost naming %s", err, addr)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Get still blocked 2s after the server was killed")
	}
}
