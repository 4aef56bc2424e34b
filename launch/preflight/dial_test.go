package preflight

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listenLoopback listens on a free loopback port, handling each
// connection with serve.
func listenLoopback(t *testing.T, serve func(net.Conn)) (net.IP, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	a := l.Addr().(*net.TCPAddr)
	return a.IP, a.Port
}

// TestDialKinds: each way a dial fails is told apart.
func TestDialKinds(t *testing.T) {
	ctx := context.Background()
	const timeout = time.Second
	ok, okPort := listenLoopback(t, func(c net.Conn) { c.Write([]byte(greetingFor("tok", 1))); c.Close() })
	_, resetPort := listenLoopback(t, func(c net.Conn) {
		c.(*net.TCPConn).SetLinger(0) // close with RST
		c.Close()
	})
	_, otherPort := listenLoopback(t, func(c net.Conn) { c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n")); c.Close() })
	_, otherJobPort := listenLoopback(t, func(c net.Conn) { c.Write([]byte(greetingFor("another", 1))); c.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().(*net.TCPAddr).Port
	l.Close()

	for _, tc := range []struct {
		name      string
		port      int
		accept    []int
		elsewhere bool
		kind      string
		detail    string
	}{
		{"greeting", okPort, []int{1}, false, "", ""},
		{"greeting of a node on the target's machine", okPort, []int{0, 1}, false, "", ""},
		{"closed", closedPort, []int{1}, false, kindRefused, "connection refused"},
		{"reset", resetPort, []int{1}, false, kindRefused, ""},
		{"another program", otherPort, []int{1}, false, kindWrongPeer, "another program"},
		{"another pre-flight", otherJobPort, []int{1}, false, kindWrongPeer, "another gotrain pre-flight"},
		{"another node", okPort, []int{2}, false, kindWrongPeer, "node 1 answers there"},
		{"loopback to another machine", okPort, []int{2}, true, kindLoopback, "node 1 answers there"},
		{"loopback refused", closedPort, []int{2}, true, kindLoopback, "refused"},
	} {
		kind, detail := dialOne(ctx, ok, tc.port, timeout, "tok", tc.accept, tc.elsewhere)
		if kind != tc.kind || !strings.Contains(detail, tc.detail) {
			t.Errorf("%s: kind %q (%s); want %q with %q", tc.name, kind, detail, tc.kind, tc.detail)
		}
	}
}

// TestDialTimeout: a listener whose queue is full drops further SYNs, as
// a firewall's DROP does: the dial times out, at the timeout.
func TestDialTimeout(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	// Fill the queue, which is never accepted from.
	var filled int
	for range 8 {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", itoa(port)), 200*time.Millisecond)
		if err != nil {
			break
		}
		defer c.Close()
		filled++
	}
	if filled == 8 {
		t.Skip("this kernel queues every connection to a listener with backlog 0; no way to make a dial time out on loopback")
	}
	start := time.Now()
	kind, detail := dialOne(context.Background(), net.IPv4(127, 0, 0, 1), port, 300*time.Millisecond, "tok", []int{1}, false)
	if kind != kindTimeout {
		t.Fatalf("kind %q (%s); want %q", kind, detail, kindTimeout)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v with a 300ms timeout", d)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestJudgeDials: a node's failed dials become one line per peer and
// kind, the ports as ranges, with what to open.
func TestJudgeDials(t *testing.T) {
	p, err := Plan{
		Hosts:      []Host{{Name: "alice@node0", Workers: 1}, {Name: "node1", Addr: "10.0.0.2", Workers: 1}},
		MasterPort: 29500, PortMin: 29600, PortMax: 29700,
	}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{plan: p}
	var fs []dialFailure
	for port := 29600; port <= 29700; port++ {
		if port != 29650 {
			fs = append(fs, dialFailure{Node: 0, Port: port, Kind: kindTimeout, IP: "10.0.0.1", Detail: "i/o timeout", Probes: 5, TookMS: 6800})
		}
	}
	fs = append(fs, dialFailure{Node: 0, Port: 29500, Kind: kindRefused, IP: "10.0.0.1", Detail: "connection refused", Probes: 5, TookMS: 760})
	c.judgeDials(1, dialReport{Failures: fs})
	var got []string
	for _, f := range c.failures {
		if f.Host != "node1" || f.Peer != "alice@node0" {
			t.Errorf("failure of %q → %q", f.Host, f.Peer)
		}
		got = append(got, f.Line)
	}
	wantLines(t, got,
		[]string{"host node1 → host alice@node0 (node0 = 10.0.0.1): data-plane ports 29600-29649,29651-29700 timed out: all 5 probes to each port failed within 6.8s", "a firewall drops them, or 10.0.0.1 is not routed from node1", "open TCP ports 29600-29700 on node0, or set GOTRAIN_PORT_RANGE"},
		[]string{"host node1 → host alice@node0 (node0 = 10.0.0.1): rendezvous port 29500 refused (connection refused; all 5 probes failed within 800ms", "open TCP port 29500 on node0, or choose another --master-port"},
	)
}

// TestCgroupRoom: a container's memory limit, in cgroup v2 or v1, bounds
// the memory available; no limit does not.
func TestCgroupRoom(t *testing.T) {
	files := map[string]string{
		"/sys/fs/cgroup/job/memory.max":                         "1073741824",
		"/sys/fs/cgroup/job/memory.current":                     "268435456",
		"/sys/fs/cgroup/free/memory.max":                        "max",
		"/sys/fs/cgroup/free/memory.current":                    "1",
		"/sys/fs/cgroup/memory/docker/c1/memory.limit_in_bytes": "536870912",
		"/sys/fs/cgroup/memory/docker/c1/memory.usage_in_bytes": "136870912",
		"/sys/fs/cgroup/memory/big/memory.limit_in_bytes":       "9223372036854771712",
		"/sys/fs/cgroup/memory/big/memory.usage_in_bytes":       "1",
	}
	read := func(p string) (string, error) {
		if s, ok := files[p]; ok {
			return s, nil
		}
		return "", os.ErrNotExist
	}
	for _, tc := range []struct {
		cg   string
		room int64
		ok   bool
	}{
		{"0::/job\n", 805306368, true},
		{"0::/free\n", 0, false},
		{"4:memory:/docker/c1\n0::/\n", 400000000, true},
		{"4:cpu,memory:/big\n", 0, false},
		{"0::/missing\n", 0, false},
		{"", 0, false},
	} {
		room, ok := cgroupRoom(tc.cg, read)
		if room != tc.room || ok != tc.ok {
			t.Errorf("cgroupRoom(%q) = %d, %v; want %d, %v", tc.cg, room, ok, tc.room, tc.ok)
		}
	}
}
