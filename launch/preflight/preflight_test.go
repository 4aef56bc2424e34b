package preflight

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"github.com/gotrain/gotrain/launch/bincache"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch/ssh"
)

// TestCheckPasses: two hosts (one machine, two listen addresses) with
// the same build and open ports pass, and the placements are the plan's.
func TestCheckPasses(t *testing.T) {
	c := newCluster(t)
	c.env("node0", "export GOTRAIN_LISTEN_HOST=127.0.0.1")
	c.env("node1", "export GOTRAIN_LISTEN_HOST=127.0.0.2")
	p := testPlan(t, "node0=127.0.0.1", "node1=127.0.0.2")
	places, err := Prepare(context.Background(), c.ssh, p)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if len(places) != 2 || places[1] != (Placement{Gotrain: p.Gotrain}) {
		t.Fatalf("placements %+v; want the plan's gotrain", places)
	}
	// Every port is closed again, ready for the workers.
	for port := p.PortMin; port <= p.PortMax; port++ {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d still held after Check: %v", port, err)
		}
		l.Close()
	}
}

// TestCheckSSHFailures: each ssh failure is one line naming the host and
// its cause, and the good host adds none.
func TestCheckSSHFailures(t *testing.T) {
	c := newCluster(t)
	err := Check(context.Background(), c.ssh, testPlan(t, "node0=127.0.0.1", "badauth", "nokey", "down"))
	wantLines(t, lines(t, err),
		[]string{"host badauth: ssh: authentication refused", "ssh-copy-id badauth"},
		[]string{"host nokey: ssh: host key not trusted", "connect once with ssh nokey"},
		[]string{"host down: ssh: unreachable (Connection refused)"},
	)
	var se *ssh.Error
	if !errors.As(err, &se) {
		t.Errorf("errors.As(*ssh.Error) fails on %v", err)
	}
}

// TestCheckGotrainMissing: no gotrain on a host is one line saying so
// and what to do.
func TestCheckGotrainMissing(t *testing.T) {
	c := newCluster(t)
	p := testPlan(t, "node0", "node1")
	p.Gotrain = "gotrain-not-installed"
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0: gotrain not found (gotrain-not-installed)", "--copy"},
		[]string{"host node1: gotrain not found (gotrain-not-installed)", "--copy"},
	)
}

// otherBuild is a copy of the test binary with bytes appended: the same
// behaviour, another sha256.
func otherBuild(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(self(t))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gotrain")
	if err := os.WriteFile(path, append(b, "another build"...), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckDifferentBuild: a host whose gotrain is another build is named,
// with both hashes.
func TestCheckDifferentBuild(t *testing.T) {
	c := newCluster(t)
	good, bad := t.TempDir(), t.TempDir()
	if err := os.Symlink(self(t), filepath.Join(good, "gotrain")); err != nil {
		t.Fatal(err)
	}
	otherBuild(t, bad)
	c.env("node0", "PATH="+good+":$PATH")
	c.env("node1", "PATH="+bad+":$PATH")
	p := testPlan(t, "node0=127.0.0.1", "node1=127.0.0.1")
	p.Gotrain = "gotrain"
	got := lines(t, Check(context.Background(), c.ssh, p))
	wantLines(t, got, []string{"host node1: gotrain is a different build", "install this build there, or use --copy"})
	if len(got) == 1 && strings.Count(got[0], "sha256") != 1 {
		t.Errorf("line %q; want both hashes", got[0])
	}
}

// TestCheckProgram: a program missing on one host and different on
// another are one line each.
func TestCheckProgram(t *testing.T) {
	c := newCluster(t)
	local := filepath.Join(t.TempDir(), "trainer")
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(local, "echo train")
	same, differs, none := t.TempDir(), t.TempDir(), t.TempDir()
	write(filepath.Join(same, "trainer"), "echo train")
	write(filepath.Join(differs, "trainer"), "echo another trainer")
	c.env("node0", "PATH="+same+":$PATH")
	c.env("node1", "PATH="+differs+":$PATH")
	c.env("node2", "PATH="+none+":$PATH")
	p := testPlan(t, "node0=127.0.0.1", "node1=127.0.0.1", "node2=127.0.0.1")
	p.Program, p.LocalProgram = "trainer", local
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node1: program " + filepath.Join(differs, "trainer") + " is a different build", "sha256"},
		[]string{"host node2: program trainer not found", "copy it there"},
	)
}

// TestCheckMemoryAndShm: a host with too little memory and /dev/shm for
// its workers is told so, one line each; so are too few free ports.
func TestCheckMemoryAndShm(t *testing.T) {
	c := newCluster(t)
	p := testPlan(t, "node0")
	p.Hosts[0].Workers = 3000 // 4.5 million same-host pairs: terabytes of rings
	p.WorkerMemory = 1 << 40
	c.env("node0", "unset GOTRAIN_SHM")
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0: /dev/shm has", "3000 workers need", "GOTRAIN_SHM=0"},
		[]string{"host node0: not enough memory: 3000 workers need about", "run fewer workers there"},
		[]string{"host node0: 6 of the data-plane ports", "3000 workers need one each", "GOTRAIN_PORT_RANGE"},
	)
	p.NoShm = true
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0: not enough memory"},
		[]string{"host node0: 6 of the data-plane ports"},
	)
}

// TestCheckRefusedNamesPair: a data-plane port on which nothing listens
// on one node is reported by the node that dials it, naming both and the
// port.
func TestCheckRefusedNamesPair(t *testing.T) {
	c := newCluster(t)
	p := testPlan(t, "node0=127.0.0.1", "node1=127.0.0.2")
	closed := p.PortMin + 2
	c.env("node0", "export GOTRAIN_LISTEN_HOST=127.0.0.1")
	c.env("node1", "export GOTRAIN_LISTEN_HOST=127.0.0.2", "export PREFLIGHT_TEST_CLOSE="+strconv.Itoa(closed))
	port := strconv.Itoa(closed)
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0 → host node1 (127.0.0.2): data-plane port " + port + " refused", "open TCP ports " + strconv.Itoa(p.PortMin) + "-" + strconv.Itoa(p.PortMax) + " on node1, or set GOTRAIN_PORT_RANGE"},
	)
}

// TestCheckRendezvousRefused: node 0's rendezvous port closed is named as
// the rendezvous port, from every other node.
func TestCheckRendezvousRefused(t *testing.T) {
	c := newCluster(t)
	p := testPlan(t, "node0=127.0.0.1", "node1=127.0.0.2", "node2=127.0.0.3")
	c.env("node0", "export GOTRAIN_LISTEN_HOST=127.0.0.1", "export PREFLIGHT_TEST_CLOSE="+strconv.Itoa(p.MasterPort))
	c.env("node1", "export GOTRAIN_LISTEN_HOST=127.0.0.2")
	c.env("node2", "export GOTRAIN_LISTEN_HOST=127.0.0.3")
	port := strconv.Itoa(p.MasterPort)
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node1 → host node0 (127.0.0.1): rendezvous port " + port + " refused", "open TCP port " + port + " on node0, or choose another --master-port"},
		[]string{"host node2 → host node0 (127.0.0.1): rendezvous port " + port + " refused"},
	)
}

// TestCheckMasterPortTaken: a rendezvous port something else holds on
// node 0 is named there.
func TestCheckMasterPortTaken(t *testing.T) {
	c := newCluster(t)
	p := testPlan(t, "node0=127.0.0.1", "node1=127.0.0.1")
	l, err := net.Listen("tcp", ":"+strconv.Itoa(p.MasterPort))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0: cannot listen on the rendezvous port " + strconv.Itoa(p.MasterPort), "in use", "another --master-port"},
	)
}

// TestCheckLoopback: a host whose name resolves to a loopback address on
// another machine is reported as loopback, naming the pair; the other
// direction works.
func TestCheckLoopback(t *testing.T) {
	c := newCluster(t)
	c.env("node0", "export GOTRAIN_LISTEN_HOST=127.0.0.1", "export PREFLIGHT_TEST_MACHINE=A")
	c.env("node1", "export GOTRAIN_LISTEN_HOST=127.0.0.2", "export PREFLIGHT_TEST_MACHINE=B")
	p := testPlan(t, "node0=127.0.0.1", "node1=localhost")
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0 → host node1 (localhost = ", "localhost resolves to", "on node0, a loopback address", "list node1 by an address the other nodes reach"},
	)
}

// TestCheckUnresolved: a host name that does not resolve on a node is
// one line for the pair. (A malformed name, which Go's resolver refuses
// without asking a DNS server.)
func TestCheckUnresolved(t *testing.T) {
	c := newCluster(t)
	c.env("node0", "export GODEBUG=netdns=go")
	p := testPlan(t, "node0=127.0.0.1", "node1=no..such..host")
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0 → host node1 (no..such..host): no..such..host does not resolve on node0"},
	)
}

// runOnly hides ssh.Client's Command: a Runner that cannot keep a
// session open.
type runOnly struct{ c ssh.Client }

func (r runOnly) Run(ctx context.Context, host string, stdin io.Reader, argv ...string) ([]byte, error) {
	return r.c.Run(ctx, host, stdin, argv...)
}

// TestCheckPlainRunner: with a Runner that only runs, every check but
// connectivity still runs.
func TestCheckPlainRunner(t *testing.T) {
	c := newCluster(t)
	bad := t.TempDir()
	otherBuild(t, bad)
	c.env("node1", "PATH="+bad+":$PATH")
	p := testPlan(t, "node0", "node1")
	p.Gotrain = "gotrain"
	var log bytes.Buffer
	p.Logger = slog.New(slog.NewTextHandler(&log, nil))
	wantLines(t, lines(t, Check(context.Background(), runOnly{c.ssh}, p)),
		[]string{"host node0: gotrain not found"},
		[]string{"host node1: gotrain is a different build"},
	)
	if !strings.Contains(log.String(), "connectivity between the nodes was not checked") {
		t.Errorf("log %q; want a warning that connectivity was not checked", log.String())
	}
}

// TestPlanErrors: plans that describe no job are refused before any
// host is contacted.
func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		p    Plan
		want string
	}{
		{Plan{}, "no host"},
		{Plan{Hosts: []Host{{Name: "a", Workers: 1}, {Name: "a", Workers: 1}}}, "listed twice"},
		{Plan{Hosts: []Host{{Name: "a"}}}, "0 workers"},
		{Plan{Hosts: []Host{{Name: "a", Workers: 1}}, PortMin: 10, PortMax: 5}, "port range 10-5"},
	} {
		err := Check(context.Background(), runOnly{}, tc.p)
		if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v; want ErrPlan with %q", tc.p, err, tc.want)
		}
	}
	t.Setenv("GOTRAIN_PORT_RANGE", "29600")
	if err := Check(context.Background(), runOnly{}, Plan{Hosts: []Host{{Name: "a", Workers: 1}}}); !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), "GOTRAIN_PORT_RANGE") {
		t.Errorf("bad GOTRAIN_PORT_RANGE: %v", err)
	}
}

// staticELF writes the header of a static executable: what --copy
// carries (it is hashed and copied, never run, here).
func staticELF(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	for _, v := range []any{uint16(2), uint16(62), uint32(1), uint64(0x401000), uint64(64), uint64(0), uint32(0), uint16(64), uint16(56), uint16(1), uint16(64), uint16(0), uint16(0),
		uint32(1), uint32(5), uint64(0), uint64(0x400000), uint64(0x400000), uint64(120), uint64(120), uint64(0x1000)} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	path := filepath.Join(t.TempDir(), "trainer")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckCopy: with Copy, hosts that have neither gotrain nor the
// program pass, and run both from their caches; a program that is not a
// static executable is not copied, and its absence is named.
func TestCheckCopy(t *testing.T) {
	c := newCluster(t)
	c.env("node0", "export GOTRAIN_LISTEN_HOST=127.0.0.1")
	c.env("node1", "export GOTRAIN_LISTEN_HOST=127.0.0.2")
	p := testPlan(t, "node0=127.0.0.1", "node1=127.0.0.2")
	p.Gotrain, p.Copy = "gotrain", true
	p.Program = staticELF(t)
	places, err := Prepare(context.Background(), c.ssh, p)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	for i, host := range []string{"node0", "node1"} {
		dir := filepath.Join(c.home(host), ".cache/gotrain/bin")
		if !strings.HasPrefix(places[i].Gotrain, dir) || filepath.Base(places[i].Gotrain) != filepath.Base(self(t)) {
			t.Errorf("%s runs gotrain from %s; want its cache %s", host, places[i].Gotrain, dir)
		}
		if !strings.HasPrefix(places[i].Program, dir) || filepath.Base(places[i].Program) != "trainer" {
			t.Errorf("%s runs the program from %s; want its cache %s", host, places[i].Program, dir)
		}
	}

	script := filepath.Join(t.TempDir(), "train.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.Program = "train.sh"
	p.LocalProgram = script
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0: program train.sh not found", "--copy carries only a static executable"},
		[]string{"host node1: program train.sh not found", "--copy carries only a static executable"},
	)
}

// expiring is a context whose deadline passes when expire is closed.
type expiring struct {
	context.Context
	expire chan struct{}
}

func (e *expiring) Done() <-chan struct{} { return e.expire }

func (e *expiring) Err() error {
	select {
	case <-e.expire:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestCheckHostHangs: a host that never answers fails at the plan's
// timeout, named, and the others' sessions are closed. The timeout
// passes once node0 has answered.
func TestCheckHostHangs(t *testing.T) {
	c := newCluster(t)
	answered := filepath.Join(t.TempDir(), "answered")
	c.env("node0", "export PREFLIGHT_TEST_ANSWERED="+answered)
	p := testPlan(t, "node0=127.0.0.1", "hang")
	p.Timeout = 42 * time.Second
	timeout := &expiring{Context: context.Background(), expire: make(chan struct{})}
	var expired time.Time
	withTimeout = func(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
		if d != p.Timeout {
			t.Errorf("the check's timeout is %v, want the plan's %v", d, p.Timeout)
		}
		go func() {
			testproc.Poll(time.Minute, func() bool { _, err := os.Stat(answered); return err == nil })
			expired = time.Now()
			close(timeout.expire)
		}()
		return timeout, func() {}
	}
	defer func() { withTimeout = context.WithTimeout }()
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host hang: no answer from preflight-node", "deadline exceeded"},
	)
	if d := time.Since(expired); d > 5*time.Second {
		t.Errorf("Check returned %v after its timeout", d)
	}
}

// TestCheckLocalProblem: a local program that cannot be read is one line
// about the launching machine, before any host is asked.
func TestCheckLocalProblem(t *testing.T) {
	c := newCluster(t)
	p := testPlan(t, "node0=127.0.0.1")
	p.Program, p.LocalProgram = "trainer", filepath.Join(t.TempDir(), "missing")
	err := Check(context.Background(), c.ssh, p)
	wantLines(t, lines(t, err), []string{"preflight: cannot hash the local program to compare", "missing"})
	if f := err.(*Error).Failures[0]; f.Host != "" {
		t.Errorf("failure names host %q; want none (the launching machine)", f.Host)
	}
}

// TestCheckShellNoise: what a host's start-up files print before the
// command runs does not confuse the check.
func TestCheckShellNoise(t *testing.T) {
	c := newCluster(t)
	c.env("node0", "echo 'Welcome to node0'")
	c.env("node1", "echo '[motd] be nice'")
	p := testPlan(t, "node0=127.0.0.1", "node1=127.0.0.1")
	if err := Check(context.Background(), c.ssh, p); err != nil {
		t.Fatalf("streaming: %v", err)
	}
	p.Logger = slog.New(slog.DiscardHandler)
	if err := Check(context.Background(), runOnly{c.ssh}, p); err != nil {
		t.Fatalf("plain runner: %v", err)
	}
}

// TestCheckCopyDoesNotStart: a copied gotrain whose loader the host
// lacks (here, a script for an interpreter nowhere) is named with the
// way out.
func TestCheckCopyDoesNotStart(t *testing.T) {
	c := newCluster(t)
	local := filepath.Join(t.TempDir(), "gotrain")
	if err := os.WriteFile(local, []byte("#!/nonexistent/ld-linux.so\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := testPlan(t, "node0=127.0.0.1")
	p.Copy, p.LocalGotrain = true, local
	wantLines(t, lines(t, Check(context.Background(), c.ssh, p)),
		[]string{"host node0: the copy of gotrain (" + c.home("node0") + "/.cache/gotrain/bin/", "does not start there", "CGO_ENABLED=0"},
	)
}

// TestCheckCopyRunsTheCachedCopy: with Copy, a second check runs gotrain
// from the host's cache; a cached copy damaged since (it still starts,
// but its hash is not this build's) is replaced with an intact one.
func TestCheckCopyRunsTheCachedCopy(t *testing.T) {
	c := newCluster(t)
	p := testPlan(t, "node0=127.0.0.1")
	p.Gotrain, p.Copy = "gotrain", true
	first, err := Prepare(context.Background(), c.ssh, p)
	if err != nil {
		t.Fatalf("first Prepare: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Dir(first[0].Gotrain)); err != nil || len(ents) != 1 {
		t.Fatalf("the cache holds %v (%v); want only the copy", ents, err)
	}
	again, err := Prepare(context.Background(), c.ssh, p)
	if err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	if again[0].Gotrain != first[0].Gotrain {
		t.Fatalf("second check runs gotrain from %s; want the cached copy %s", again[0].Gotrain, first[0].Gotrain)
	}
	f, err := os.OpenFile(first[0].Gotrain, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("damage"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	places, err := Prepare(context.Background(), c.ssh, p)
	if err != nil {
		t.Fatalf("Prepare with a damaged copy: %v", err)
	}
	got, err := bincache.Stat(places[0].Gotrain)
	if err != nil {
		t.Fatal(err)
	}
	want, err := bincache.Stat(self(t))
	if err != nil {
		t.Fatal(err)
	}
	if got.SHA256 != want.SHA256 {
		t.Fatalf("the damaged copy %s was not replaced: sha256 %s, want %s", places[0].Gotrain, got.SHA256, want.SHA256)
	}
}
