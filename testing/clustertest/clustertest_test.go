package clustertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
)

// TestMain lets the test binary serve as a program on a host:
// TESTCLUSTER_SEND=ADDR:PORT:N listens there and writes N bytes to the
// first connection.
func TestMain(m *testing.M) {
	if spec := os.Getenv("TESTCLUSTER_SEND"); spec != "" {
		os.Exit(send(spec))
	}
	os.Exit(m.Run())
}

func send(spec string) int {
	i := strings.LastIndex(spec, ":")
	n, err := strconv.Atoi(spec[i+1:])
	if err != nil {
		fmt.Println("bad TESTCLUSTER_SEND:", spec)
		return 2
	}
	l, err := net.Listen("tcp", spec[:i])
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	fmt.Println("listening")
	c, err := l.Accept()
	if err != nil {
		fmt.Println("accept:", err)
		return 1
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, n)); err != nil {
		fmt.Println("write:", err)
		return 1
	}
	return 0
}

// TestHosts: ssh into each host (real sshd, key authentication, strict
// host key checking) runs in that host: its hostname, its own HOME, its
// /etc/hosts naming every host, an empty hidden directory, its own
// /dev/shm, and the SetEnv variables.
func TestHosts(t *testing.T) {
	hidden := t.TempDir()
	if err := os.WriteFile(filepath.Join(hidden, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := New(t, Options{Hosts: 3, Hide: []string{hidden}, Env: []string{"TESTCLUSTER_VAR=set"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := `hostname; echo "$HOME"; ls -A ~; ls -A ` + hidden + `; echo "shm=$(ls -A /dev/shm | wc -l)"; ` +
		`echo "var=$TESTCLUSTER_VAR"; getent hosts node0 node1 node2 | wc -l; echo "$SSH_CONNECTION"`
	for _, h := range c.Hosts {
		if err := os.WriteFile(filepath.Join(h.Home, "mine"), []byte(h.Name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range c.Hosts {
		out, err := c.SSH(ctx, h, "sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh %s: %v: %s", h.Name, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		want := []string{h.Name, "/root", "mine", "shm=0", "var=set", "3"}
		if len(lines) != 7 {
			t.Fatalf("ssh %s: got %q, want %d lines", h.Name, lines, 7)
		}
		for j, w := range want {
			if lines[j] != w {
				t.Errorf("ssh %s: line %d is %q, want %q (all: %q)", h.Name, j, lines[j], w, lines)
			}
		}
		if f := strings.Fields(lines[6]); len(f) != 4 || f[0] != c.LocalAddr || f[2] != h.Addr {
			t.Errorf("ssh %s: SSH_CONNECTION %q, want from %s to %s", h.Name, lines[6], c.LocalAddr, h.Addr)
		}
		// The same view without ssh.
		out, err = h.Command(ctx, "sh", "-c", "hostname; cat ~/mine").CombinedOutput()
		if err != nil || string(out) != h.Name+"\n"+h.Name {
			t.Errorf("Command on %s: %q, %v", h.Name, out, err)
		}
	}
	// The hosts reach each other by name.
	out, err := c.SSH(ctx, c.Hosts[0], "ssh", "-o", "BatchMode=yes", "-o", "IdentityFile="+c.identity,
		"-o", "UserKnownHostsFile="+c.knownHosts, "-o", "StrictHostKeyChecking=yes", "node2", "hostname").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "node2" {
		t.Errorf("ssh node0 → node2: %q, %v", out, err)
	}
	// An unknown key is refused.
	other := filepath.Join(t.TempDir(), "other")
	mustRun(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other)
	cmd := exec.CommandContext(ctx, "ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "IdentityFile="+other,
		"-o", "UserKnownHostsFile="+c.knownHosts, "-o", "StrictHostKeyChecking=yes", c.Hosts[1].Addr, "true")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("ssh with an unknown key: %v: %s; want Permission denied", err, out)
	}
}

// TestShape: a shaped host's link is slower, in delay and in rate.
func TestShape(t *testing.T) {
	c := New(t, Options{})
	h := c.Hosts[0]
	connect := func() time.Duration {
		t.Helper()
		start := time.Now()
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(h.Addr, "22"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		conn.Close()
		return d
	}
	const size = 1 << 20
	transfer := func(port int) time.Duration {
		t.Helper()
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort(h.Addr, strconv.Itoa(port))
		cmd := h.Command(context.Background(), exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("TESTCLUSTER_SEND=%s:%d", addr, size))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		if l, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || l != "listening\n" {
			t.Fatalf("sender: %q, %v", l, err)
		}
		start := time.Now()
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		n, err := io.Copy(io.Discard, conn)
		if err != nil || n != size {
			t.Fatalf("received %d bytes, %v; want %d", n, err, size)
		}
		return time.Since(start)
	}
	plain := transfer(29001)
	h.Shape(t, 20e6, 0)
	shaped := transfer(29002)
	t.Logf("1 MiB: %v unshaped, %v at 20 Mbit/s", plain, shaped)
	// 1 MiB at 20 Mbit/s is 0.42 s.
	if shaped < 350*time.Millisecond || shaped < 3*plain {
		t.Errorf("1 MiB took %v at 20 Mbit/s, %v unshaped", shaped, plain)
	}
	h.Unshape(t)
	if d := transfer(29003); d > shaped/3 {
		t.Errorf("1 MiB took %v after Unshape, %v shaped", d, shaped)
	}
	t.Run("delay", func(t *testing.T) {
		plain := connect()
		h.Shape(t, 0, 50*time.Millisecond)
		defer h.Unshape(t)
		shaped := connect()
		t.Logf("connect: %v unshaped, %v with a 50 ms delay", plain, shaped)
		if shaped < 50*time.Millisecond {
			t.Errorf("connect through a 50 ms delay took %v", shaped)
		}
	})
}

// TestFirewall: DropTCP makes a port time out, RejectTCP refuses it, and
// ClearFirewall opens it again; LinkDown cuts a host off and LinkUp
// brings it back.
func TestFirewall(t *testing.T) {
	c := New(t, Options{})
	h := c.Hosts[1]
	dial := func() error {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(h.Addr, "22"), 500*time.Millisecond)
		if err == nil {
			conn.Close()
		}
		return err
	}
	timedOut := func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}
	if err := dial(); err != nil {
		t.Fatalf("open port: %v", err)
	}
	h.DropTCP(t, "22")
	if err := dial(); !timedOut(err) {
		t.Errorf("dropped port: %v, want a timeout", err)
	}
	h.ClearFirewall(t)
	h.RejectTCP(t, "20-30")
	if err := dial(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("rejected port: %v, want connection refused", err)
	}
	h.ClearFirewall(t)
	if err := dial(); err != nil {
		t.Errorf("after ClearFirewall: %v", err)
	}
	h.DropAll(t)
	if err := dial(); !timedOut(err) {
		t.Errorf("DropAll: %v, want a timeout", err)
	}
	h.ClearFirewall(t)
	h.LinkDown(t)
	if err := dial(); err == nil {
		t.Errorf("link down: connected")
	}
	h.LinkUp(t)
	// The link takes a moment to come up (IPv4 neighbour discovery).
	if !testproc.Poll(10*time.Second, func() bool { return dial() == nil }) {
		t.Fatalf("link up: %v", dial())
	}
}

// TestCleanup: a cluster leaves nothing behind, neither after a passing
// test (with a process started over ssh that outlived its session) nor
// after a failing one (in a child test binary).
func TestCleanup(t *testing.T) {
	if os.Getenv("TESTCLUSTER_FAIL") == "1" {
		c := New(t, Options{})
		fmt.Printf("cluster %s %s %s %d\n", c.Bridge, c.Hosts[0].NetNS, c.Hosts[1].NetNS, c.Hosts[0].sshd.Process.Pid)
		t.Fatal("failing on purpose")
	}
	var names []string
	var pids []int
	t.Run("pass", func(t *testing.T) {
		c := New(t, Options{})
		out, err := c.SSH(context.Background(), c.Hosts[1], "sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!").Output()
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("background pid %q", out)
		}
		ps, err := c.Hosts[1].Procs()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range ps {
			found = found || p.PID == pid && strings.Contains(p.Cmdline, "sleep 300")
		}
		if !found {
			t.Errorf("Procs %v does not list the background sleep %d", ps, pid)
		}
		names = []string{c.Bridge, c.Hosts[0].NetNS, c.Hosts[1].NetNS}
		pids = []int{pid, c.Hosts[0].sshd.Process.Pid, c.Hosts[1].sshd.Process.Pid}
	})
	if os.Geteuid() != 0 || Available(true) != "" {
		return // skipped above
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestCleanup$", "-test.v")
	cmd.Env = append(os.Environ(), "TESTCLUSTER_FAIL=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "failing on purpose") {
		t.Fatalf("failing child: %v\n%s", err, out)
	}
	for l := range strings.Lines(string(out)) {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "cluster" {
			names = append(names, f[1:4]...)
			pid, _ := strconv.Atoi(f[4])
			pids = append(pids, pid)
		}
	}
	if len(names) != 6 {
		t.Fatalf("child did not name its cluster:\n%s", out)
	}
	links, _ := exec.Command("ip", "-o", "link").Output()
	nss, _ := exec.Command("ip", "netns", "list").Output()
	for _, n := range names {
		if strings.Contains(string(links), " "+n+":") || strings.Contains(string(links), " "+n+"@") {
			t.Errorf("link %s left", n)
		}
		for l := range strings.Lines(string(nss)) {
			if f := strings.Fields(l); len(f) > 0 && f[0] == n {
				t.Errorf("namespace %s left", n)
			}
		}
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d left", pid)
		}
	}
}

// alive reports whether pid is a process that is not a zombie, waiting
// for a killed one's parent to reap it.
func alive(pid int) bool {
	gone := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		i := strings.LastIndex(string(b), ") ")
		return i >= 0 && strings.HasPrefix(string(b)[i+2:], "Z")
	}
	return !testproc.Poll(10*time.Second, gone)
}

// TestNoSSH: hosts without sshd still have their own namespaces, and
// reach each other.
func TestNoSSH(t *testing.T) {
	c := New(t, Options{NoSSH: true})
	for i, h := range c.Hosts {
		peer := c.Hosts[1-i]
		out, err := h.Command(context.Background(), "sh", "-c", "hostname; getent hosts "+peer.Name).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", h.Name, err, out)
		}
		if want := h.Name + "\n" + peer.Addr + " "; !strings.HasPrefix(string(out), want) {
			t.Errorf("%s: %q, want it to start with %q", h.Name, out, want)
		}
	}
}
