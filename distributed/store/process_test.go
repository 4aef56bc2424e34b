package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gotrain/gotrain/internal/testproc"
)

// workers are the multi-process tests' processes, each this test binary
// re-run:
//
//	rank    rendezvous through the store that STORE_TEST_KIND (tcp or file)
//	        and STORE_TEST_WHERE (address or path) name, as RANK of WORLD_SIZE
//	server  serve a store, print its address, wait to be killed
var workers = testproc.Workers{
	"rank":   func() int { return testproc.ExitCode(rankWorker()) },
	"server": func() int { return testproc.ExitCode(serverWorker()) },
}

func TestMain(m *testing.M) {
	testproc.Dispatch(workers)
	goleak.VerifyTestMain(m)
}

func serverWorker() error {
	s, err := Listen("127.0.0.1:0", testToken)
	if err != nil {
		return err
	}
	fmt.Println(s.Addr())
	select {} // until SIGKILL
}

func rankWorker() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kind, where := os.Getenv("STORE_TEST_KIND"), os.Getenv("STORE_TEST_WHERE")
	rank, err1 := strconv.Atoi(os.Getenv("RANK"))
	world, err2 := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	if err := errors.Join(err1, err2); err != nil {
		return err
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
	if err := s.Set(ctx, fmt.Sprint("done/", rank), nil); err != nil {
		return err
	}
	return s.Wait(ctx, "release")
}

func testProcesses(t *testing.T, kind, where string, s Store) {
	const world = 3
	ranks := testproc.Start(t, "rank", world, testproc.Options{
		Env:     []string{"STORE_TEST_KIND=" + kind, "STORE_TEST_WHERE=" + where},
		Timeout: 30 * time.Second,
	})
	var done []string
	for r := range world {
		done = append(done, fmt.Sprint("done/", r))
	}
	if err := s.Wait(ctxFor(t, 30*time.Second), done...); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, "counter", fmt.Sprint(world*20))
	mustSet(t, s, "release", "")
	ranks.WaitOK()
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
	server := testproc.Start(t, "server", 1, testproc.Options{})
	line, ok := server.Procs()[0].WaitLine("", 10*time.Second)
	if !ok {
		t.Fatal("server worker printed no address")
	}
	addr := strings.TrimSpace(line.Text)
	c, err := Dial(ctxFor(t, 10*time.Second), addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	ctx, waiting := waitingFor(t, 30*time.Second)
	go func() {
		_, err := c.Get(ctx, "never")
		errc <- err
	}()
	<-waiting
	server.Kill()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrConnLost) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("Get after the server died = %v; want ErrConnLost naming %s", err, addr)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Get still blocked 2s after the server was killed")
	}
}
