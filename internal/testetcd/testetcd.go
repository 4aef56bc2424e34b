// Package testetcd starts a private etcd server for tests.
package testetcd

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testenv"
	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
)

// freeAddr picks a port for etcd; a test replaces it to force a clash.
var freeAddr = testnet.FreeAddr

// attempts bounds the starts Start makes when etcd finds a port taken.
const attempts = 5

// Start starts Debian's etcd on loopback with a data directory of its
// own and returns its client endpoint ("127.0.0.1:port"); the server is
// killed by PID when the test ends. It skips without etcd unless
// GOTRAIN_REQUIRE_ENGINES=1.
//
// etcd cannot be handed a listening socket, so its ports are chosen free
// and then bound by etcd itself; another process may bind one in
// between. etcd then exits saying "address already in use", and Start
// tries again on new ports.
func Start(t testing.TB) string {
	t.Helper()
	bin := testenv.LookPath(t, "etcd")
	for i := 1; ; i++ {
		client, out, ok := start(t, bin)
		if ok {
			return client
		}
		if !strings.Contains(out, "address already in use") || i == attempts {
			t.Fatalf("etcd exited (start %d of %d):\n%s", i, attempts, out)
		}
		t.Logf("etcd found a port taken; starting it again on new ports:\n%s", out)
	}
}

// start runs one etcd and waits until its client port answers (ok) or it
// exits (not ok, with its output).
func start(t testing.TB, bin string) (client, output string, ok bool) {
	t.Helper()
	client, peer := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "--name", "gotrain-test", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "gotrain-test=http://"+peer, "--log-level", "error")
	out := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Kill()
			<-exited
		})
	}
	t.Cleanup(stop)
	// etcd says it is ready only in its info log, so its /version is
	// polled (a refused connection costs nothing) until etcd itself
	// answers there, not whatever else may hold the port; etcd's exit
	// ends the wait.
	var gone bool
	// No kept-alive connection outlives the wait (its goroutines would
	// outlive the test's server).
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	listening := testproc.Poll(30*time.Second, func() bool {
		select {
		case <-exited:
			gone = true
			return true
		default:
		}
		resp, err := hc.Get("http://" + client + "/version")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return err == nil && strings.Contains(string(body), "etcdserver")
	})
	switch {
	case gone:
		stop()
		return "", out.String(), false
	case !listening:
		t.Fatalf("etcd not listening on %s after 30s:\n%s", client, out.String())
	}
	return client, "", true
}
