// Package clustertest builds a small cluster of "hosts" on one Linux
// machine for multi-node tests: network namespaces joined by a bridge,
// each running a real OpenSSH server with key authentication in its own
// mount and UTS namespaces (its own HOME, /etc/hosts, hostname,
// /usr/local/bin and /dev/shm, and optionally hidden paths), with tc
// shaping, nft firewall rules and link down/up per host. Everything it
// creates (namespaces, links, processes, mounts) is removed when the test
// ends, also when it fails.
//
// It needs root, ip(8), tc(8), nft(8), unshare(1), nsenter(1) and
// OpenSSH's sshd, ssh and ssh-keygen. New skips the test when one is
// missing, or fails it when GOTRAIN_REQUIRE_ENGINES=1.
//
// Addresses: cluster k uses 10.97.k.0/24, host i is 10.97.k.(i+1) and
// the test process (the "launching machine", in the initial network
// namespace) is 10.97.k.254 on the bridge. k is chosen so that clusters
// of tests running in parallel, in one or several test binaries, never
// share a subnet or a name: the bridge's name embeds k and creating it
// is the lock.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testenv"
	"github.com/gotrain/gotrain/internal/testproc"
)

// Prefix starts the name of every network namespace and link this
// package creates, so that a CI teardown can find what a killed test
// binary left behind.
const Prefix = "gtc"

// Options configure a cluster. The zero value is two hosts.
type Options struct {
	// Hosts is the number of hosts, 1 to 9; 0 means 2.
	Hosts int
	// Hide lists absolute paths (directories) that every host sees as
	// empty: a tmpfs is mounted over each, as on a machine where they do
	// not exist. The cluster's own directory (keys, sshd configuration)
	// must not be under one of them.
	Hide []string
	// Env is set in every ssh session (sshd's SetEnv), as KEY=VALUE.
	Env []string
	// ShmSize is the size of each host's own /dev/shm; "" means 256m.
	ShmSize string
	// NoSSH builds the hosts without sshd, for tests that start their
	// processes with Host.Command only; sshd and ssh are then not needed.
	NoSSH bool
}

// Cluster is a set of hosts on one bridge.
type Cluster struct {
	// Hosts are the hosts, node 0 first.
	Hosts []*Host
	// Subnet is the cluster's network, such as "10.97.12.0/24".
	Subnet string
	// LocalAddr is the test process's address on the bridge.
	LocalAddr string
	// Bridge is the bridge's link name in the initial namespace.
	Bridge string
	// Dir holds the keys, known_hosts and sshd configurations.
	Dir string

	identity, knownHosts string
}

// Host is one machine of the cluster.
type Host struct {
	// Name is its hostname and its name in every host's /etc/hosts.
	Name string
	// Addr is its IPv4 address on the cluster's network.
	Addr string
	// NetNS is its network namespace's name (for ip netns exec).
	NetNS string
	// Dev is its interface's name inside NetNS.
	Dev string
	// Home is the directory it sees as /root (root's HOME).
	Home string
	// Bin is the directory it sees as /usr/local/bin, in the PATH of ssh
	// sessions: Install puts programs there.
	Bin string
	// EtcHosts is the file it sees as /etc/hosts; SetHosts rewrites it.
	EtcHosts string

	hostDev string // the veth end on the bridge
	sshd    *exec.Cmd
	sshdLog *lockedBuffer
	exited  chan struct{}
}

// counter distinguishes the clusters of one test binary.
var counter atomic.Int64

// Available returns why a cluster (with sshd on its hosts if ssh) cannot
// be built here, or "".
func Available(ssh bool) string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	progs := []string{"ip", "tc", "nft", "unshare", "nsenter"}
	if ssh {
		progs = append(progs, "ssh", "ssh-keygen")
	}
	for _, p := range progs {
		if why := testenv.Missing(p); why != "" {
			return why
		}
	}
	if _, err := os.Stat(sshdPath); ssh && err != nil {
		return "no " + sshdPath + " (Debian package openssh-server)"
	}
	return ""
}

// sshdPath is where Debian installs sshd; it must be started by an
// absolute path to re-execute itself for each connection.
const sshdPath = "/usr/sbin/sshd"

// New builds a cluster and registers its removal with t.Cleanup. It skips
// the test when the machine cannot (see Available), unless
// GOTRAIN_REQUIRE_ENGINES=1.
func New(t testing.TB, o Options) *Cluster {
	t.Helper()
	if why := Available(!o.NoSSH); why != "" {
		testenv.Need(t, "a namespace cluster", why)
	}
	if o.Hosts == 0 {
		o.Hosts = 2
	}
	if o.Hosts < 1 || o.Hosts > 9 {
		t.Fatalf("clustertest: %d hosts, want 1 to 9", o.Hosts)
	}
	if o.ShmSize == "" {
		o.ShmSize = "256m"
	}
	c := &Cluster{Dir: t.TempDir()}
	for _, h := range o.Hide {
		if !filepath.IsAbs(h) {
			t.Fatalf("clustertest: hidden path %q is not absolute", h)
		}
		if rel, err := filepath.Rel(h, c.Dir); err == nil && !strings.HasPrefix(rel, "..") {
			t.Fatalf("clustertest: hidden path %s holds the cluster's directory %s", h, c.Dir)
		}
	}
	t.Cleanup(func() { c.teardown(t) })
	k, err := c.allocate()
	if err != nil {
		testenv.Need(t, "a namespace cluster", err.Error())
	}
	c.Subnet = fmt.Sprintf("10.97.%d.0/24", k)
	c.LocalAddr = fmt.Sprintf("10.97.%d.254", k)
	mustRun(t, "ip", "addr", "add", c.LocalAddr+"/24", "dev", c.Bridge)
	mustRun(t, "ip", "link", "set", c.Bridge, "up")
	for i := range o.Hosts {
		base := fmt.Sprintf("%s%dh%d", Prefix, k, i)
		h := &Host{
			Name:    fmt.Sprintf("node%d", i),
			Addr:    fmt.Sprintf("10.97.%d.%d", k, i+1),
			NetNS:   base,
			Dev:     "eth0",
			hostDev: base,
		}
		c.Hosts = append(c.Hosts, h)
		mustRun(t, "ip", "netns", "add", h.NetNS)
		mustRun(t, "ip", "link", "add", h.hostDev, "type", "veth", "peer", "name", h.Dev, "netns", h.NetNS)
		mustRun(t, "ip", "link", "set", h.hostDev, "master", c.Bridge)
		mustRun(t, "ip", "link", "set", h.hostDev, "up")
		mustRun(t, "ip", "-n", h.NetNS, "addr", "add", h.Addr+"/24", "dev", h.Dev)
		mustRun(t, "ip", "-n", h.NetNS, "link", "set", h.Dev, "up")
		mustRun(t, "ip", "-n", h.NetNS, "link", "set", "lo", "up")
	}
	if !o.NoSSH {
		c.keys(t)
	}
	var etcHosts strings.Builder
	etcHosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, h := range c.Hosts {
		fmt.Fprintf(&etcHosts, "%s\t%s\n", h.Addr, h.Name)
	}
	for i, h := range c.Hosts {
		dir := filepath.Join(c.Dir, h.Name)
		h.Home, h.Bin, h.EtcHosts = filepath.Join(dir, "home"), filepath.Join(dir, "bin"), filepath.Join(dir, "hosts")
		for _, d := range []string{h.Home, h.Bin} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(h.EtcHosts, []byte(etcHosts.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		c.startHost(t, i, o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, h := range c.Hosts {
		if err := h.waitReady(ctx, !o.NoSSH); err != nil {
			t.Fatalf("clustertest: %s: %v\n%s", h.Name, err, h.sshdLog.String())
		}
	}
	return c
}

// allocate picks a free subnet index and creates the bridge that claims it.
func (c *Cluster) allocate() (int, error) {
	start := (os.Getpid()*7 + int(counter.Add(1))*31) % 250
	var last error
	for j := range 250 {
		k := 1 + (start+j)%250
		name := fmt.Sprintf("%s%dbr", Prefix, k)
		out, err := exec.Command("ip", "link", "add", name, "type", "bridge").CombinedOutput()
		if err == nil {
			c.Bridge = name
			return k, nil
		}
		last = fmt.Errorf("ip link add %s type bridge: %v: %s", name, err, strings.TrimSpace(string(out)))
		if !strings.Contains(string(out), "exists") {
			return 0, last
		}
	}
	return 0, fmt.Errorf("no free cluster subnet: %w", last)
}

// keys makes the client key, each host's key, authorized_keys and
// known_hosts.
func (c *Cluster) keys(t testing.TB) {
	t.Helper()
	c.identity = filepath.Join(c.Dir, "id_ed25519")
	c.knownHosts = filepath.Join(c.Dir, "known_hosts")
	mustRun(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "clustertest", "-f", c.identity)
	pub, err := os.ReadFile(c.identity + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "authorized_keys"), pub, 0o600); err != nil {
		t.Fatal(err)
	}
	var known strings.Builder
	for _, h := range c.Hosts {
		key := filepath.Join(c.Dir, "hostkey_"+h.Name)
		mustRun(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", h.Name, "-f", key)
		hp, err := os.ReadFile(key + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(hp))
		fmt.Fprintf(&known, "%s,%s %s %s\n", h.Name, h.Addr, f[0], f[1])
	}
	if err := os.WriteFile(c.knownHosts, []byte(known.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// SSHOptions are the ssh client settings that reach the hosts with the
// cluster's key and trust exactly their host keys, as KEY=VALUE for
// ssh -o or gotrain's --ssh-option.
func (c *Cluster) SSHOptions() []string {
	return []string{
		"IdentityFile=" + c.identity,
		"IdentitiesOnly=yes",
		"UserKnownHostsFile=" + c.knownHosts,
		"GlobalKnownHostsFile=/dev/null",
		"StrictHostKeyChecking=yes",
		"LogLevel=ERROR",
	}
}

// SSHFlags are SSHOptions as gotrain's flags: --ssh-option KEY=VALUE ….
func (c *Cluster) SSHFlags() []string {
	var f []string
	for _, o := range c.SSHOptions() {
		f = append(f, "--ssh-option", o)
	}
	return f
}

// SSH returns the command that runs argv on h with the real ssh client,
// as a user would: ssh -o BatchMode=yes -o … ADDR 'argv…'.
func (c *Cluster) SSH(ctx context.Context, h *Host, argv ...string) *exec.Cmd {
	args := []string{"-o", "BatchMode=yes", "-o", "ConnectTimeout=5"}
	for _, o := range c.SSHOptions() {
		args = append(args, "-o", o)
	}
	args = append(args, "--", h.Addr)
	if len(argv) > 0 {
		args = append(args, shellQuote(argv))
	}
	return exec.CommandContext(ctx, "ssh", args...)
}

// shellQuote quotes argv for the remote shell.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// sshdConfig is one host's sshd_config.
func (c *Cluster) sshdConfig(h *Host, o Options) string {
	var b strings.Builder
	// Loopback too, as a machine's sshd listens on every address: a host
	// whose /etc/hosts maps its own name to 127.0.1.1 reaches itself.
	fmt.Fprintf(&b, "ListenAddress %s\nListenAddress 127.0.0.1\nListenAddress 127.0.1.1\nPort 22\nHostKey %s\n", h.Addr, filepath.Join(c.Dir, "hostkey_"+h.Name))
	b.WriteString("PermitRootLogin prohibit-password\nPubkeyAuthentication yes\nPasswordAuthentication no\n" +
		"KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\nUseDNS no\n" +
		"PrintMotd no\nPrintLastLog no\nMaxStartups 200\nMaxSessions 100\nLogLevel INFO\n")
	fmt.Fprintf(&b, "AuthorizedKeysFile %s\n", filepath.Join(c.Dir, "authorized_keys"))
	if len(o.Env) > 0 {
		fmt.Fprintf(&b, "SetEnv %s\n", strings.Join(o.Env, " "))
	}
	return b.String()
}

// startHost starts host i's first process in its network namespace and
// in new mount and UTS namespaces: sshd, whose sessions inherit them, or
// with NoSSH a process that only holds them for Command.
func (c *Cluster) startHost(t testing.TB, i int, o Options) {
	t.Helper()
	h := c.Hosts[i]
	cfg := filepath.Join(c.Dir, "sshd_config_"+h.Name)
	if err := os.WriteFile(cfg, []byte(c.sshdConfig(h, o)), 0o600); err != nil {
		t.Fatal(err)
	}
	final := fmt.Sprintf("exec %s -D -e -f %s\n", sshdPath, cfg)
	if o.NoSSH {
		// sleep sits in the namespaces until teardown kills it.
		final = "exec sleep 2147483647\n"
	}
	// The mounts are private to this namespace: nothing leaks to the
	// machine, and they vanish with the namespace's last process.
	var script strings.Builder
	script.WriteString("set -e\nmount --make-rprivate /\nmkdir -p /run/sshd\n")
	fmt.Fprintf(&script, "mount --bind %s /root\n", h.Home)
	fmt.Fprintf(&script, "mount --bind %s /etc/hosts\n", h.EtcHosts)
	fmt.Fprintf(&script, "mkdir -p /usr/local/bin\nmount --bind %s /usr/local/bin\n", h.Bin)
	fmt.Fprintf(&script, "mount -t tmpfs -o size=%s,mode=1777 tmpfs /dev/shm\n", o.ShmSize)
	for _, p := range o.Hide {
		fmt.Fprintf(&script, "if [ -d %[1]s ]; then mount -t tmpfs -o size=1m tmpfs %[1]s; fi\n", shellQuote([]string{p}))
	}
	fmt.Fprintf(&script, "hostname %s\necho %s\n%s", h.Name, readyLine, final)
	cmd := exec.Command("ip", "netns", "exec", h.NetNS, "unshare", "--mount", "--uts", "--propagation", "private",
		"sh", "-c", script.String())
	h.sshdLog = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = h.sshdLog, h.sshdLog
	if err := cmd.Start(); err != nil {
		t.Fatalf("clustertest: start sshd on %s: %v", h.Name, err)
	}
	h.sshd = cmd
	h.exited = make(chan struct{})
	go func() { cmd.Wait(); close(h.exited) }()
}

// readyLine is what a host's setup prints when its mounts are in place.
const readyLine = "clustertest: host ready"

// waitReady waits until h's namespaces are set up and, if ssh, its sshd
// accepts connections.
func (h *Host) waitReady(ctx context.Context, ssh bool) error {
	for {
		select {
		case <-h.exited:
			return errors.New("setup or sshd exited")
		default:
		}
		if !ssh {
			if strings.Contains(h.sshdLog.String(), readyLine) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("setup: %w", ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(h.Addr, "22"))
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sshd does not listen: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// SSHDLog is what h's setup and sshd have written: connections, refusals.
func (h *Host) SSHDLog() string { return h.sshdLog.String() }

// Command returns the command that runs name with args on h directly,
// without ssh: in h's network, mount and UTS namespaces, so that it sees
// h's addresses, HOME, /etc/hosts, hostname and hidden paths. Its
// environment is the caller's (cmd.Env). Its process is killed when ctx
// is done.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	a := append([]string{"--target", strconv.Itoa(h.sshd.Process.Pid), "--net", "--mount", "--uts", "--", name}, args...)
	return exec.CommandContext(ctx, "nsenter", a...)
}

// Install copies the file src to h's /usr/local/bin/name, which ssh
// sessions find in their PATH.
func (h *Host) Install(t testing.TB, src, name string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("clustertest: install on %s: %v", h.Name, err)
	}
	if err := os.WriteFile(filepath.Join(h.Bin, name), data, 0o755); err != nil {
		t.Fatalf("clustertest: install on %s: %v", h.Name, err)
	}
}

// SetHosts replaces h's /etc/hosts (in place: the bind mount stays).
func (h *Host) SetHosts(t testing.TB, content string) {
	t.Helper()
	if err := os.WriteFile(h.EtcHosts, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Shape limits what h's interface sends to bitsPerSecond (0: no limit)
// and delays it by delay, so that a link between two shaped hosts has
// that rate each way and twice the delay as its round trip. A rate alone
// uses tbf; a delay needs the kernel's netem qdisc, and without it (see
// HasDelay) the test is skipped: no package can add it.
func (h *Host) Shape(t testing.TB, bitsPerSecond int64, delay time.Duration) {
	t.Helper()
	if bitsPerSecond < 0 || delay < 0 || bitsPerSecond == 0 && delay == 0 {
		t.Fatalf("clustertest: Shape(%d bit/s, %v): want a positive rate or delay", bitsPerSecond, delay)
	}
	if delay > 0 {
		if !HasDelay() {
			t.Skipf("clustertest: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM) to delay a link")
		}
		args := []string{"-n", h.NetNS, "qdisc", "replace", "dev", h.Dev, "root", "netem",
			"delay", fmt.Sprintf("%dus", delay.Microseconds()), "limit", "100000"}
		if bitsPerSecond > 0 {
			args = append(args, "rate", fmt.Sprintf("%dbit", bitsPerSecond))
		}
		mustRun(t, "tc", args...)
		return
	}
	// A bucket of 1 ms of traffic (at least 64 KiB, a GSO segment) keeps
	// the rate exact at high speeds; the queue holds 20 ms more.
	burst := max(bitsPerSecond/8/1000, 64<<10)
	mustRun(t, "tc", "-n", h.NetNS, "qdisc", "replace", "dev", h.Dev, "root", "tbf",
		"rate", fmt.Sprintf("%dbit", bitsPerSecond), "burst", strconv.FormatInt(burst, 10), "latency", "20ms")
}

var (
	delayOnce sync.Once
	hasDelay  bool
)

// HasDelay reports whether the kernel can delay a link (the netem qdisc).
func HasDelay() bool {
	delayOnce.Do(func() {
		ns := fmt.Sprintf("%sprobe%d", Prefix, os.Getpid())
		if exec.Command("ip", "netns", "add", ns).Run() != nil {
			return
		}
		defer exec.Command("ip", "netns", "del", ns).Run()
		hasDelay = exec.Command("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms").Run() == nil
	})
	return hasDelay
}

// Unshape removes h's shaping.
func (h *Host) Unshape(t testing.TB) {
	t.Helper()
	mustRun(t, "tc", "-n", h.NetNS, "qdisc", "del", "dev", h.Dev, "root")
}

// nftTable is the table the firewall helpers own in each host.
const nftTable = "gotrain_testcluster"

// Nft loads an nft ruleset (nft -f syntax) into h's namespace.
func (h *Host) Nft(t testing.TB, ruleset string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", h.NetNS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clustertest: nft on %s: %v: %s", h.Name, err, out)
	}
}

// DropTCP makes h's firewall silently drop incoming TCP connections to
// ports, an nft set such as "29600-29700" or "22, 29500": nothing is
// refused or reset, as behind a firewall that drops.
func (h *Host) DropTCP(t testing.TB, ports string) {
	t.Helper()
	h.Nft(t, fmt.Sprintf("table inet %s {\n chain in {\n  type filter hook input priority 0;\n  tcp dport { %s } drop\n }\n}\n", nftTable, ports))
}

// RejectTCP makes h's firewall refuse incoming TCP connections to ports
// with a reset, as a firewall that rejects.
func (h *Host) RejectTCP(t testing.TB, ports string) {
	t.Helper()
	h.Nft(t, fmt.Sprintf("table inet %s {\n chain in {\n  type filter hook input priority 0;\n  tcp dport { %s } reject with tcp reset\n }\n}\n", nftTable, ports))
}

// DropAll makes h's firewall drop every packet in and out: a partition
// with no reset and no EOF either way.
func (h *Host) DropAll(t testing.TB) {
	t.Helper()
	h.Nft(t, fmt.Sprintf("table inet %s {\n chain in { type filter hook input priority 0; policy drop; }\n chain out { type filter hook output priority 0; policy drop; }\n}\n", nftTable))
}

// ClearFirewall removes the rules DropTCP, RejectTCP and DropAll added.
func (h *Host) ClearFirewall(t testing.TB) {
	t.Helper()
	h.Nft(t, fmt.Sprintf("delete table inet %s\n", nftTable))
}

// LinkDown takes h's interface down: packets stop both ways and no
// connection is reset, as when a cable is pulled.
func (h *Host) LinkDown(t testing.TB) {
	t.Helper()
	mustRun(t, "ip", "-n", h.NetNS, "link", "set", h.Dev, "down")
}

// LinkUp brings h's interface back up.
func (h *Host) LinkUp(t testing.TB) {
	t.Helper()
	mustRun(t, "ip", "-n", h.NetNS, "link", "set", h.Dev, "up")
}

// Proc is a process running on a host.
type Proc struct {
	PID     int
	Cmdline string
}

// Procs lists the processes in h's network namespace other than its
// sshd listener (or namespace holder): ssh sessions, their commands, and
// what Command started.
func (h *Host) Procs() ([]Proc, error) {
	pids, err := netnsPIDs(h.NetNS)
	if err != nil {
		return nil, err
	}
	var ps []Proc
	for _, pid := range pids {
		if pid == h.sshd.Process.Pid {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue // gone meanwhile
		}
		ps = append(ps, Proc{PID: pid, Cmdline: strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))})
	}
	return ps, nil
}

// Shm lists the names in h's /dev/shm.
func (h *Host) Shm() ([]string, error) {
	out, err := h.Command(context.Background(), "ls", "-A", "/dev/shm").Output()
	if err != nil {
		return nil, fmt.Errorf("ls /dev/shm on %s: %w", h.Name, err)
	}
	return strings.Fields(string(out)), nil
}

// netnsPIDs lists the processes whose network namespace is ns.
func netnsPIDs(ns string) ([]int, error) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w", ns, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// teardown kills every process in the hosts' namespaces (they are the
// test's), deletes the namespaces and the bridge, and checks that
// nothing is left.
func (c *Cluster) teardown(t testing.TB) {
	for _, h := range c.Hosts {
		if t.Failed() && h.sshdLog != nil {
			t.Logf("clustertest: sshd log of %s:\n%s", h.Name, h.sshdLog.String())
		}
		// Killed processes leave the namespace once reaped; ones forked
		// meanwhile are killed in turn.
		var pids []int
		if !testproc.Poll(10*time.Second, func() bool {
			var err error
			pids, err = netnsPIDs(h.NetNS)
			if err != nil || len(pids) == 0 {
				return true
			}
			for _, pid := range pids {
				if p, err := os.FindProcess(pid); err == nil {
					p.Kill()
				}
			}
			return false
		}) {
			t.Errorf("clustertest: processes %v left in %s after SIGKILL", pids, h.NetNS)
		}
		if h.exited != nil {
			<-h.exited
		}
		exec.Command("ip", "link", "del", h.hostDev).Run() // gone with the namespace if it was created
		if out, err := exec.Command("ip", "netns", "del", h.NetNS).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			t.Errorf("clustertest: ip netns del %s: %v: %s", h.NetNS, err, out)
		}
	}
	if c.Bridge != "" {
		if out, err := exec.Command("ip", "link", "del", c.Bridge).CombinedOutput(); err != nil {
			t.Errorf("clustertest: ip link del %s: %v: %s", c.Bridge, err, out)
		}
	}
}

// mustRun runs a setup command, failing t with its output.
func mustRun(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("clustertest: %s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// lockedBuffer collects a process's output for several readers.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
