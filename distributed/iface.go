package distributed

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ifaceAddrs is one network interface as the address choice sees it.
type ifaceAddrs struct {
	name  string
	up    bool
	addrs []netip.Addr
}

// ifRule is a parsed interface selection in NCCL_SOCKET_IFNAME's syntax:
// comma-separated interface name prefixes, the whole list negated by a
// leading "^" and made exact names by a leading "=" (after any "^"),
// plus CIDR entries that select addresses rather than interfaces.
type ifRule struct {
	from    string // where the rule came from, for messages: `GOTRAIN_SOCKET_IFNAME="eth"`
	exclude bool   // "^": every address the entries do not match
	exact   bool   // "=": names match whole, not as prefixes
	names   []string
	nets    []netip.Prefix
}

// parseIfRule parses s, set in variable from.
func parseIfRule(from, s string) (ifRule, error) {
	r := ifRule{from: fmt.Sprintf("%s=%q", from, s)}
	rest := strings.TrimSpace(s)
	if r.exclude = strings.HasPrefix(rest, "^"); r.exclude {
		rest = rest[1:]
	}
	if r.exact = strings.HasPrefix(rest, "="); r.exact {
		rest = rest[1:]
	}
	for e := range strings.SplitSeq(rest, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return r, fmt.Errorf("%w: %s: %q is not a CIDR (want 10.0.0.0/8 or fd00::/8): %w", ErrConfig, r.from, e, err)
			}
			r.nets = append(r.nets, p.Masked())
		default:
			r.names = append(r.names, e)
		}
	}
	if len(r.names) == 0 && len(r.nets) == 0 {
		return r, fmt.Errorf("%w: %s names no interface or CIDR", ErrConfig, r.from)
	}
	return r, nil
}

// selects reports whether the rule selects address a of interface name.
func (r ifRule) selects(name string, a netip.Addr) bool {
	hit := false
	for _, n := range r.names {
		hit = hit || name == n || !r.exact && strings.HasPrefix(name, n)
	}
	for _, p := range r.nets {
		hit = hit || p.Contains(a)
	}
	return hit != r.exclude
}

// pickAddr returns the first IPv4 address that r selects on an interface
// that is up, else the first IPv6 one, in the order of ifs. Link-local
// IPv6 addresses are never chosen (peers would need this host's zone),
// nor loopback ones when noLoopback (a multi-node job). The error names
// the rule and every interface seen.
func pickAddr(r ifRule, ifs []ifaceAddrs, noLoopback bool) (netip.Addr, error) {
	var v4, v6 []netip.Addr
	var loopback []string
	for _, ifc := range ifs {
		for _, a := range ifc.addrs {
			if !ifc.up || a.IsLinkLocalUnicast() && a.Is6() || !r.selects(ifc.name, a) {
				continue
			}
			switch {
			case noLoopback && a.IsLoopback():
				loopback = append(loopback, ifc.name+" "+a.String())
			case a.Is4():
				v4 = append(v4, a)
			default:
				v6 = append(v6, a)
			}
		}
	}
	if len(v4) > 0 {
		return v4[0], nil
	}
	if len(v6) > 0 {
		return v6[0], nil
	}
	if len(loopback) > 0 {
		return netip.Addr{}, fmt.Errorf("%w: %s selects only loopback (%s), which the other nodes of a multi-node job cannot reach; interfaces seen: %s",
			ErrConfig, r.from, strings.Join(loopback, ", "), describeIfaces(ifs))
	}
	return netip.Addr{}, fmt.Errorf("%w: %s selects no usable address of an interface that is up; interfaces seen: %s", ErrConfig, r.from, describeIfaces(ifs))
}

// describeIfaces lists ifs for an error: "lo 127.0.0.1 ::1, eth0 (down) 10.0.0.2".
func describeIfaces(ifs []ifaceAddrs) string {
	if len(ifs) == 0 {
		return "none"
	}
	var parts []string
	for _, ifc := range ifs {
		s := ifc.name
		if !ifc.up {
			s += " (down)"
		}
		for _, a := range ifc.addrs {
			s += " " + a.String()
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// systemInterfaces lists this host's interfaces and their addresses.
func systemInterfaces() ([]ifaceAddrs, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("distributed: list network interfaces: %w", err)
	}
	out := make([]ifaceAddrs, 0, len(ifs))
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("distributed: addresses of interface %s: %w", ifc.Name, err)
		}
		ia := ifaceAddrs{name: ifc.Name, up: ifc.Flags&net.FlagUp != 0}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ad, ok := netip.AddrFromSlice(ipn.IP); ok {
					ia.addrs = append(ia.addrs, ad.Unmap())
				}
			}
		}
		out = append(out, ia)
	}
	return out, nil
}

// defaultIfRule is NCCL's choice when no rule is set and no route says
// better: any interface but docker bridges and loopback.
const defaultIfRule = "^docker,lo"

// advertiseInput is what chooseAdvertise decides from.
type advertiseInput struct {
	listen       string // Config.ListenHost
	rule, ruleOf string // Config.SocketIfname and where it came from
	master, port string // the store's host and port; "" for file://
	noLoopback   bool   // a multi-node job without GOTRAIN_ALLOW_LOOPBACK
	interfaces   func() ([]ifaceAddrs, error)
}

// chooseAdvertise picks the host other ranks dial for this rank's data
// plane, and says why: an explicit listen host; else the interface rule
// (GOTRAIN_SOCKET_IFNAME or GLOO_SOCKET_IFNAME); else the source address
// of the route to the master (a UDP "connection", no packet sent); else
// loopback on a single node. In a multi-node job the result is never a
// loopback address found by the rule or the route: a route that gives
// loopback (MASTER_ADDR is this host's name, which Debian's /etc/hosts
// maps to 127.0.1.1) falls back to the first address of defaultIfRule,
// and a listen host that is a name resolving only to loopback is refused.
// A literal loopback listen host is taken as given: it was asked for.
func chooseAdvertise(in advertiseInput) (host, why string, err error) {
	if ip := net.ParseIP(in.listen); in.listen != "" && (ip == nil || !ip.IsUnspecified()) {
		if ip == nil && in.noLoopback {
			if ips, lerr := net.LookupIP(in.listen); lerr == nil && len(ips) > 0 && allLoopback(ips) {
				return "", "", fmt.Errorf("%w: listen host %q resolves to %v, loopback, in a multi-node job (as /etc/hosts maps a host's own name to 127.0.1.1): the other nodes cannot reach it; set GOTRAIN_LISTEN_HOST to this node's network address, or GOTRAIN_SOCKET_IFNAME",
					ErrConfig, in.listen, ips)
			}
		}
		return in.listen, "listen host", nil
	}
	if in.rule != "" {
		r, err := parseIfRule(in.ruleOf, in.rule)
		if err != nil {
			return "", "", err
		}
		a, err := pickInterfaces(r, in)
		if err != nil {
			return "", "", err
		}
		return a.String(), "rule " + r.from, nil
	}
	route := "no master address"
	if in.master != "" {
		c, derr := net.Dial("udp", net.JoinHostPort(in.master, in.port))
		if derr == nil {
			ip := c.LocalAddr().(*net.UDPAddr).IP
			c.Close()
			if !in.noLoopback || !ip.IsLoopback() {
				return ip.String(), "route to master " + in.master, nil
			}
			route = fmt.Sprintf("the route to master %s leaves from loopback %v", in.master, ip)
		} else {
			route = fmt.Sprintf("no route to master %s: %v", in.master, derr)
		}
	}
	if !in.noLoopback {
		return "127.0.0.1", route + ": single node", nil
	}
	r, perr := parseIfRule("default", defaultIfRule)
	if perr != nil {
		panic("distributed: bad defaultIfRule: " + perr.Error())
	}
	r.from = fmt.Sprintf("%s; the default rule %q", route, defaultIfRule)
	a, err := pickInterfaces(r, in)
	if err != nil {
		return "", "", err
	}
	return a.String(), route + ": first interface address (" + defaultIfRule + ")", nil
}

// pickInterfaces is pickAddr on in's interfaces.
func pickInterfaces(r ifRule, in advertiseInput) (netip.Addr, error) {
	ifs, err := in.interfaces()
	if err != nil {
		return netip.Addr{}, err
	}
	return pickAddr(r, ifs, in.noLoopback)
}

func allLoopback(ips []net.IP) bool {
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// advertise is chooseAdvertise for this rank's Config, logged.
func advertise(cfg Config, env storeEnv, master, port string) (string, error) {
	host, why, err := chooseAdvertise(advertiseInput{
		listen: cfg.ListenHost, rule: cfg.SocketIfname, ruleOf: cfg.socketIfnameFrom,
		master: master, port: port,
		noLoopback: env.localWorldSize > 0 && env.localWorldSize < cfg.WorldSize && !env.allowLoopback,
		interfaces: systemInterfaces,
	})
	if err != nil {
		return "", fmt.Errorf("distributed: rank %d: choose the address to advertise: %w", cfg.Rank, err)
	}
	cfg.Logger.Info("distributed: advertising address", "address", host, "why", why) // the logger names the rank
	return host, nil
}
