package distributed

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
)

func init() {
	// joinBarrier: Init with the environment's settings, then a barrier,
	// so that rank 0, which serves the store, leaves only after every
	// rank's Init has returned.
	workers["joinBarrier"] = func() int {
		ctx := context.Background()
		g, err := Init(ctx, Config{})
		if err != nil {
			fmt.Println("init error:", err)
			return 2
		}
		defer g.Destroy()
		if err := g.Barrier(ctx); err != nil {
			fmt.Println("barrier error:", err)
			return 1
		}
		fmt.Println("joined")
		return 0
	}
}

// fakeIfaces is a host with loopback, a docker bridge, an IPv6-only
// interface listed before the Ethernet ones, and an interface that is down.
func fakeIfaces() []ifaceAddrs {
	a := netip.MustParseAddr
	return []ifaceAddrs{
		{"lo", true, []netip.Addr{a("127.0.0.1"), a("::1")}},
		{"docker0", true, []netip.Addr{a("172.17.0.1")}},
		{"ib0", true, []netip.Addr{a("fe80::5"), a("fd00::5")}},
		{"eth0", true, []netip.Addr{a("fe80::1"), a("10.1.2.3"), a("2001:db8::3")}},
		{"eth1", true, []netip.Addr{a("192.168.5.7")}},
		{"eth10", false, []netip.Addr{a("10.9.9.9")}},
	}
}

// TestPickAddr: NCCL's syntax (prefixes, "^", "=") and CIDRs select the
// first IPv4 address, else the first IPv6 one, of interfaces that are
// up; never an IPv6 link-local one; never loopback in a multi-node job.
// A rule that selects nothing is an error naming it and what was seen.
func TestPickAddr(t *testing.T) {
	for _, tc := range []struct {
		rule      string
		multiNode bool
		want      string // the address, or text in the error
	}{
		{"eth", false, "10.1.2.3"},
		{"eth1", false, "192.168.5.7"}, // eth10 matches too, but is down
		{"=eth1", false, "192.168.5.7"},
		{" eth1 , ib ", false, "192.168.5.7"}, // IPv4 first, though ib0 comes before
		{"ib", false, "fd00::5"},              // not the link-local fe80::5
		{"^docker,lo", false, "10.1.2.3"},
		{"^lo,docker,eth", false, "fd00::5"},
		{"^=eth0,lo,docker0,ib0", false, "192.168.5.7"},
		{"^10.0.0.0/8,lo", false, "172.17.0.1"},
		{"192.168.0.0/16", false, "192.168.5.7"},
		{"192.168.5.1/16", false, "192.168.5.7"}, // host bits are ignored
		{"2001:db8::/32", false, "2001:db8::3"},
		{"fd00::/8,eth1", false, "192.168.5.7"},
		{"lo", false, "127.0.0.1"},
		{"lo", true, `GOTRAIN_SOCKET_IFNAME="lo" selects only loopback (lo 127.0.0.1, lo ::1), which the other nodes of a multi-node job cannot reach; interfaces seen: lo 127.0.0.1 ::1, docker0 172.17.0.1, ib0 fe80::5 fd00::5, eth0 fe80::1 10.1.2.3 2001:db8::3, eth1 192.168.5.7, eth10 (down) 10.9.9.9`},
		{"127.0.0.0/8,^x", true, "selects only loopback (lo 127.0.0.1)"},
		{"=eth", false, `GOTRAIN_SOCKET_IFNAME="=eth" selects no usable address of an interface that is up; interfaces seen: lo 127.0.0.1 ::1,`},
		{"eth10", false, "selects no usable address"},
		{"fe80::/10", false, "selects no usable address"},
		{"wlan", true, "eth10 (down) 10.9.9.9"},
		{"10.0.0.0/33", false, `GOTRAIN_SOCKET_IFNAME="10.0.0.0/33": "10.0.0.0/33" is not a CIDR`},
		{"^,", false, `GOTRAIN_SOCKET_IFNAME="^," names no interface or CIDR`},
	} {
		r, err := parseIfRule("GOTRAIN_SOCKET_IFNAME", tc.rule)
		var a netip.Addr
		if err == nil {
			a, err = pickAddr(r, fakeIfaces(), tc.multiNode)
		}
		if _, perr := netip.ParseAddr(tc.want); perr == nil {
			if err != nil || a.String() != tc.want {
				t.Errorf("%q (multi-node %v): %v, %v; want %s", tc.rule, tc.multiNode, a, err, tc.want)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q (multi-node %v): %v, %v; want an ErrConfig containing %q", tc.rule, tc.multiNode, a, err, tc.want)
		}
	}
}

// TestChooseAdvertise: an explicit listen host wins, then the rule, then
// the route to the master; a multi-node job whose route leaves from
// loopback (MASTER_ADDR is this host's name, mapped to 127.0.1.1) takes
// the first interface address instead, and fails if there is none.
func TestChooseAdvertise(t *testing.T) {
	onlyLo := func() ([]ifaceAddrs, error) { return fakeIfaces()[:1], nil }
	for _, tc := range []struct {
		name          string
		in            advertiseInput
		want, wantWhy string // address and text in why, or wantErr
		wantErr       string
	}{
		{name: "listen host wins", in: advertiseInput{listen: "10.0.0.5", rule: "lo", master: "127.0.0.1", port: "29500"},
			want: "10.0.0.5", wantWhy: "listen host"},
		{name: "loopback listen host as asked", in: advertiseInput{listen: "127.0.0.1", noLoopback: true},
			want: "127.0.0.1", wantWhy: "listen host"},
		{name: "unspecified listen host", in: advertiseInput{listen: "0.0.0.0", rule: "eth1", master: "127.0.0.1", port: "29500"},
			want: "192.168.5.7", wantWhy: `rule GOTRAIN_SOCKET_IFNAME="eth1"`},
		{name: "rule", in: advertiseInput{rule: "^lo,docker", master: "127.0.0.1", port: "29500", noLoopback: true},
			want: "10.1.2.3", wantWhy: "rule"},
		{name: "route", in: advertiseInput{master: "127.0.0.1", port: "29500"},
			want: "127.0.0.1", wantWhy: "route to master 127.0.0.1"},
		{name: "route to 127.0.1.1 in a multi-node job", in: advertiseInput{master: "127.0.1.1", port: "29500", noLoopback: true},
			want: "10.1.2.3", wantWhy: "the route to master 127.0.1.1 leaves from loopback"},
		{name: "no master, single node", in: advertiseInput{},
			want: "127.0.0.1", wantWhy: "no master address: single node"},
		{name: "no master, multi-node", in: advertiseInput{noLoopback: true},
			want: "10.1.2.3", wantWhy: "first interface address"},
		{name: "only loopback, multi-node", in: advertiseInput{master: "127.0.1.1", port: "29500", noLoopback: true, interfaces: onlyLo},
			wantErr: `the route to master 127.0.1.1 leaves from loopback 127.0.`},
		{name: "only loopback, multi-node, names the default rule", in: advertiseInput{noLoopback: true, interfaces: onlyLo},
			wantErr: `no master address; the default rule "^docker,lo" selects no usable address of an interface that is up; interfaces seen: lo 127.0.0.1 ::1`},
		{name: "host name of loopback, multi-node", in: advertiseInput{listen: "localhost", noLoopback: true},
			wantErr: `listen host "localhost" resolves to`},
		{name: "host name of loopback, single node", in: advertiseInput{listen: "localhost"},
			want: "localhost", wantWhy: "listen host"},
	} {
		if tc.in.interfaces == nil {
			tc.in.interfaces = func() ([]ifaceAddrs, error) { return fakeIfaces(), nil }
		}
		if tc.in.ruleOf == "" {
			tc.in.ruleOf = "GOTRAIN_SOCKET_IFNAME"
		}
		host, why, err := chooseAdvertise(tc.in)
		if tc.wantErr != "" {
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %q, %q, %v; want an ErrConfig containing %q", tc.name, host, why, err, tc.wantErr)
			}
			continue
		}
		if err != nil || host != tc.want || !strings.Contains(why, tc.wantWhy) {
			t.Errorf("%s: %q, %q, %v; want %q because %q", tc.name, host, why, err, tc.want, tc.wantWhy)
		}
	}
}

// TestSocketIfnameEnv: GOTRAIN_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME,
// fills Config.SocketIfname, and messages name the variable used.
func TestSocketIfnameEnv(t *testing.T) {
	for _, tc := range []struct{ gotrain, gloo, field, want, from string }{
		{"eth", "ib0", "", "eth", "GOTRAIN_SOCKET_IFNAME"},
		{"", "ib0", "", "ib0", "GLOO_SOCKET_IFNAME"},
		{"eth", "ib0", "=bond0", "=bond0", "Config.SocketIfname"},
	} {
		t.Setenv("GOTRAIN_SOCKET_IFNAME", tc.gotrain)
		t.Setenv("GLOO_SOCKET_IFNAME", tc.gloo)
		c, err := Config{WorldSize: 1, SocketIfname: tc.field}.resolveFields()
		if err != nil || c.SocketIfname != tc.want || c.socketIfnameFrom != tc.from {
			t.Errorf("%+v: %q from %q, %v; want %q from %q", tc, c.SocketIfname, c.socketIfnameFrom, err, tc.want, tc.from)
		}
	}
}

// TestProcessSocketIfname: two ranks in two network namespaces, no listen
// host, each selecting its veth (rank 0 by exact name, rank 1 by CIDR),
// form the group, and each logs the veth's address and the rule. Rank
// 0's namespace also has another interface, listed first, which a choice
// of "the first interface" would take.
func TestProcessSocketIfname(t *testing.T) {
	n := newNetnsPair(t)
	// A second veth pair inside rank 0's namespace: created there, it
	// takes a lower interface index than the veth moved in.
	h0 := n.Hosts[0]
	extra := "extra0"
	for _, args := range [][]string{
		{"link", "add", extra, "type", "veth", "peer", "name", extra + "p"},
		{"addr", "add", "10.231.78.1/24", "dev", extra},
		{"link", "set", extra, "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", h0.NetNS}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	rules := [2]string{"=" + h0.Dev, n.Subnet}
	var ps [2]*testproc.Proc
	for r := range 2 {
		ps[r] = startInNetns(t, n, "joinBarrier", r, "GOTRAIN_LISTEN_HOST=", "GOTRAIN_SOCKET_IFNAME="+rules[r], "GOTRAIN_SHM=0", "GOTRAIN_CONNECT_TIMEOUT=20s")
	}
	for r, p := range ps {
		if _, ok := p.WaitLine("joined", 30*time.Second); !ok {
			t.Fatalf("rank %d did not join:\n%s", r, p.Text())
		}
		out := p.Text()
		want := "address=" + n.Hosts[r].Addr + " "
		ok := false
		for l := range strings.Lines(out) {
			if strings.Contains(l, "advertising address") {
				ok = strings.Contains(l, want) && strings.Contains(l, "GOTRAIN_SOCKET_IFNAME")
				t.Logf("rank %d: %s", r, strings.TrimSpace(l))
			}
		}
		if !ok {
			t.Errorf("rank %d did not log advertising %s by GOTRAIN_SOCKET_IFNAME:\n%s", r, n.Hosts[r].Addr, out)
		}
	}
}

// TestProcessHostnameLoopback: node 0's /etc/hosts maps its own name to
// 127.0.1.1, as Debian's does, and MASTER_ADDR is that name; node 1's
// maps it to node 0's address. Rank 0's route to the master leaves from
// loopback, so it advertises its interface's address instead, and the
// group forms.
func TestProcessHostnameLoopback(t *testing.T) {
	n := newNetnsPair(t)
	name := n.Hosts[0].Name
	for r, addr := range []string{"127.0.1.1", n.Hosts[0].Addr} {
		n.Hosts[r].SetHosts(t, "127.0.0.1 localhost\n"+addr+" "+name+"\n")
	}
	var ps [2]*testproc.Proc
	for r := range 2 {
		ps[r] = startInNetns(t, n, "joinBarrier", r, "GOTRAIN_LISTEN_HOST=", "MASTER_ADDR="+name,
			"GOTRAIN_SOCKET_IFNAME=", "GLOO_SOCKET_IFNAME=", "GOTRAIN_SHM=0", "GOTRAIN_CONNECT_TIMEOUT=20s")
	}
	for r, p := range ps {
		if _, ok := p.WaitLine("joined", 30*time.Second); !ok {
			t.Fatalf("rank %d did not join:\n%s", r, p.Text())
		}
		out := p.Text()
		ok := false
		for l := range strings.Lines(out) {
			if strings.Contains(l, "advertising address") {
				ok = strings.Contains(l, "address="+n.Hosts[r].Addr+" ")
				t.Logf("rank %d: %s", r, strings.TrimSpace(l))
			}
		}
		if !ok {
			t.Errorf("rank %d did not advertise %s:\n%s", r, n.Hosts[r].Addr, out)
		}
	}
}
