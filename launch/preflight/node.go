package preflight

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/internal/resolve"
)

// NodeCommand is the hidden gotrain subcommand that runs Node on a host.
const NodeCommand = "preflight-node"

// maxLine bounds one line of the conversation (a dial report of a large
// cluster is the longest).
const maxLine = 16 << 20

// Node is the host's side of Check, run by `gotrain preflight-node` over
// ssh: it reads the launcher's request from in, checks this host (its
// gotrain build, the program, free /dev/shm and memory), listens on the
// rendezvous port (node 0) and the data-plane port range, answers on out,
// then dials the nodes the launcher names and answers again, and keeps
// listening until in reaches its end. It returns when in ends or ctx is
// done, having closed every port.
func Node(ctx context.Context, in io.Reader, out io.Writer) error {
	rd := bufio.NewReaderSize(in, 64<<10)
	var req request
	if err := readLine(rd, &req); err != nil {
		return fmt.Errorf("preflight-node: read the request: %w", err)
	}
	if req.Workers < 0 || req.WorldSize < req.Workers || req.PortMin < 0 || req.PortMax < req.PortMin || req.PortMax > 65535 || req.MasterPort < 0 || req.MasterPort > 65535 {
		return fmt.Errorf("preflight-node: bad request %+v", req)
	}
	p := probeSelf(req)
	ls := listen(&req, &p)
	defer ls.close()
	if err := writeLine(out, p); err != nil {
		return err
	}

	// Dial when told to; stop at the end of input whenever it comes.
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		for {
			line, err := rd.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				select {
				case lines <- line:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("preflight-node: read: %w", err)
		case line := <-lines:
			var dr dialRequest
			if err := json.Unmarshal(line, &dr); err != nil {
				return fmt.Errorf("preflight-node: malformed dial request: %w", err)
			}
			if err := writeLine(out, dialAll(ctx, req, dr)); err != nil {
				return err
			}
		}
	}
}

// readLine reads one JSON line into v.
func readLine(rd *bufio.Reader, v any) error {
	line, err := rd.ReadBytes('\n')
	if len(bytes.TrimSpace(line)) == 0 {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if len(line) > maxLine {
		return fmt.Errorf("line of %d bytes", len(line))
	}
	return json.Unmarshal(line, v)
}

// writeLine writes v as one JSON line.
func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		panic("preflight: marshal: " + err.Error()) // plain structs
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("preflight-node: write: %w", err)
	}
	return nil
}

// probeSelf answers everything but the ports.
func probeSelf(req request) probe {
	var p probe
	b, err := distributed.LocalBuild()
	p.Build = b
	if err != nil {
		p.BuildErr = err.Error()
	}
	if exe, err := os.Executable(); err == nil {
		p.Executable = exe
	}
	if req.Program != "" {
		p.ProgramPath, p.ProgramSHA256, p.ProgramMissing, err = findProgram(req.Program)
		if err != nil {
			p.ProgramErr = err.Error()
		}
	}
	if req.Shm && shm.Enabled() {
		p.ShmNeed = shm.Need(req.Workers, req.WorldSize)
		if p.ShmNeed > 0 {
			if p.ShmFree, err = shm.Free(); err != nil {
				p.ShmErr = err.Error()
			}
		}
	}
	if p.MemAvailable, err = memAvailable(); err != nil {
		p.MemErr = err.Error()
	}
	p.Machine = machineID()
	return p
}

// findProgram finds prog as the workers' exec would, and hashes it.
func findProgram(prog string) (path, sum string, missing bool, err error) {
	path = prog
	if !strings.Contains(prog, "/") {
		if path, err = exec.LookPath(prog); err != nil {
			return prog, "", true, nil
		}
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return path, "", true, nil
	case err != nil:
		return path, "", false, err
	case !st.Mode().IsRegular():
		return path, "", false, fmt.Errorf("%s is not a regular file", path)
	case st.Mode().Perm()&0o111 == 0:
		return path, "", false, fmt.Errorf("%s is not executable (chmod +x it)", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return path, "", false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return path, "", false, fmt.Errorf("hash %s: %w", path, err)
	}
	return path, hex.EncodeToString(h.Sum(nil)), false, nil
}

// memAvailable is what new processes can use without swapping, in
// bytes: /proc/meminfo's MemAvailable, or less when this process's memory
// cgroup (a container's limit) leaves less room.
func memAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	avail := int64(-1)
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					avail = n << 10
				}
			}
			break
		}
	}
	if avail < 0 {
		return 0, errors.New("no MemAvailable line in /proc/meminfo")
	}
	if cg, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		if room, ok := cgroupRoom(string(cg), readTrim); ok && room < avail {
			avail = room
		}
	}
	return avail, nil
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// cgroupRoom is the memory left under the limit of the memory cgroup
// that /proc/self/cgroup's content cg names (v2's memory.max, else v1's
// memory.limit_in_bytes), read through read; false when there is no
// limit or it cannot be read.
func cgroupRoom(cg string, read func(path string) (string, error)) (int64, bool) {
	var v1, v2 string
	for _, l := range strings.Split(cg, "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = f[2]
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				v1 = f[2]
			}
		}
	}
	room := func(limitPath, usagePath string) (int64, bool) {
		ls, err := read(limitPath)
		if err != nil {
			return 0, false
		}
		limit, err := strconv.ParseInt(ls, 10, 64)
		if err != nil || limit >= 1<<60 { // "max", or v1's "unlimited" page-rounded int64
			return 0, false
		}
		us, err := read(usagePath)
		if err != nil {
			return 0, false
		}
		usage, err := strconv.ParseInt(us, 10, 64)
		if err != nil {
			return 0, false
		}
		return max(0, limit-usage), true
	}
	if v1 != "" {
		d := filepath.Join("/sys/fs/cgroup/memory", v1)
		if r, ok := room(filepath.Join(d, "memory.limit_in_bytes"), filepath.Join(d, "memory.usage_in_bytes")); ok {
			return r, true
		}
	}
	if v2 != "" {
		d := filepath.Join("/sys/fs/cgroup", v2)
		return room(filepath.Join(d, "memory.max"), filepath.Join(d, "memory.current"))
	}
	return 0, false
}

// machineID names the machine's port space and addresses: the boot (so
// two machines differ) and the network namespace (so two namespaces of one
// machine differ). Nodes with the same one share ports. Tests set it to
// stand for several machines.
var machineID = func() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := strings.TrimSpace(string(boot))
	if st, err := os.Stat("/proc/self/ns/net"); err == nil {
		if s, ok := st.Sys().(*syscall.Stat_t); ok {
			id += "/net:" + strconv.FormatUint(s.Ino, 10)
		}
	}
	if id == "" {
		id, _ = os.Hostname()
	}
	return id
}

// closeAfterListen, when set by a test, names ports to close right after
// listening (while still reporting them held): a port nothing listens on,
// as a firewall's REJECT looks to a dialer.
var closeAfterListen func(port int) bool

// listeners are a node's open ports.
type listeners struct {
	ls []net.Listener
	wg sync.WaitGroup
}

// listen opens the master port (when req names one) and every free port
// of the data-plane range, on GOTRAIN_LISTEN_HOST (where the workers will
// listen) or all interfaces, and records them in p. Each accepted
// connection is answered with this node's greeting and closed.
func listen(req *request, p *probe) *listeners {
	host := os.Getenv("GOTRAIN_LISTEN_HOST")
	greeting := []byte(greetingFor(req.Token, req.Node))
	s := &listeners{}
	open := func(port int) (bool, error) {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false, err
		}
		if closeAfterListen != nil && closeAfterListen(port) {
			l.Close()
			return true, nil
		}
		s.ls = append(s.ls, l)
		s.wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.SetWriteDeadline(time.Now().Add(2 * time.Second))
				c.Write(greeting)
				c.Close()
			}
		})
		return true, nil
	}
	if req.MasterPort > 0 {
		if _, err := open(req.MasterPort); err != nil {
			p.MasterErr = errText(err)
		}
	}
	if req.PortMin > 0 {
		for port := req.PortMin; port <= req.PortMax; port++ {
			if port == req.MasterPort {
				continue
			}
			if ok, _ := open(port); ok { // else another program (or node) holds it
				p.Held = append(p.Held, port)
			}
		}
	}
	return s
}

// close stops listening and waits for the accept loops.
func (s *listeners) close() {
	for _, l := range s.ls {
		l.Close()
	}
	s.wg.Wait()
}

// greetingFor is what node's listeners say to whoever dials them.
func greetingFor(token string, node int) string {
	return "gotrain-preflight " + token + " " + strconv.Itoa(node) + "\n"
}

// dialConcurrency bounds a node's dials in flight.
const dialConcurrency = 256

// How a port is probed: up to maxProbes attempts, the first bounded by
// firstProbeTimeout (a working link answers in milliseconds, and a
// dropped SYN is only resent after a second), each next one by twice the
// last up to the dial timeout, with a backoff between them that starts at
// probeBackoff and doubles; all of a node's probes end within the probe
// budget. A port that answers any probe is reachable; the probes it lost
// on the way measure the link's loss.
const (
	maxProbes         = 5
	firstProbeTimeout = 500 * time.Millisecond
	probeBackoff      = 50 * time.Millisecond
	// DefaultProbeBudget bounds all of one node's probes.
	DefaultProbeBudget = 10 * time.Second
)

// portResult is what the probes to one port found.
type portResult struct {
	probes, lost int
	kind, detail string // the last failure's, when every probe failed
	took         time.Duration
	deadline     bool
}

// dialAll probes every port of every target at once (up to
// dialConcurrency) and reports the ports no probe reached, and every
// target's probes sent and lost.
func dialAll(ctx context.Context, req request, dr dialRequest) dialReport {
	timeout := time.Duration(dr.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	budget := time.Duration(dr.BudgetMS) * time.Millisecond
	if budget <= 0 {
		budget = DefaultProbeBudget
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var (
		mu  sync.Mutex // guards rep
		rep dialReport
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, dialConcurrency)
	fail := func(f dialFailure) {
		mu.Lock()
		rep.Failures = append(rep.Failures, f)
		mu.Unlock()
	}
	rep.Links = make([]linkStats, len(dr.Targets))
	for k, t := range dr.Targets {
		rep.Links[k].Node = t.Node
		ips, err := resolve.Host(ctx, t.Addr)
		if err != nil {
			fail(dialFailure{Node: t.Node, Kind: kindResolve, Detail: resolveText(err)})
			continue
		}
		ip := ips[0] // as net.Dial would try first
		for _, port := range t.Ports {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				r := probePort(ctx, ip, port, timeout, req.Token, t.Accept, !slices.Contains(t.Accept, req.Node))
				mu.Lock()
				rep.Dialed++
				l := &rep.Links[k]
				l.Probes += r.probes
				l.Lost += r.lost
				if r.lost > 0 {
					l.LostPorts = append(l.LostPorts, port)
				}
				mu.Unlock()
				if r.kind != "" {
					fail(dialFailure{Node: t.Node, Port: port, Kind: r.kind, IP: ip.String(), Detail: r.detail,
						Probes: r.probes, TookMS: int(r.took / time.Millisecond), Deadline: r.deadline})
				}
			})
		}
	}
	wg.Wait()
	slices.SortFunc(rep.Failures, func(a, b dialFailure) int {
		if a.Node != b.Node {
			return a.Node - b.Node
		}
		return a.Port - b.Port
	})
	for k := range rep.Links {
		slices.Sort(rep.Links[k].LostPorts)
	}
	return rep
}

// probePort probes ip:port until one probe is answered, maxProbes have
// failed, or ctx ends. A probe that another program answers, or that
// reaches this machine in place of another, is not tried again: that
// answer does not change.
func probePort(ctx context.Context, ip net.IP, port int, timeout time.Duration, token string, accept []int, elsewhere bool) portResult {
	var r portResult
	start := time.Now()
	attempt := min(firstProbeTimeout, timeout)
	backoff := probeBackoff
	for r.probes < maxProbes {
		kind, detail := dialOne(ctx, ip, port, attempt, token, accept, elsewhere)
		r.probes++
		if kind == "" {
			r.kind, r.detail = "", ""
			break
		}
		r.lost++
		r.kind, r.detail = kind, detail
		if kind == kindWrongPeer || kind == kindLoopback || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		backoff *= 2
		attempt = min(2*attempt, timeout)
	}
	r.took = time.Since(start)
	r.deadline = r.kind != "" && ctx.Err() != nil
	return r
}

// resolveText is a failed lookup's message.
func resolveText(err error) string {
	var re *resolve.Error
	if errors.As(err, &re) {
		return fmt.Sprintf("%v (%d lookups in %v)", errText(re.Err), re.Tries, re.Took.Round(10*time.Millisecond))
	}
	return errText(err)
}

// dialOne dials ip:port and reads the greeting. It returns "" when a node
// in accept answered, else the kind of failure and the system's message.
// elsewhere means the target is on another machine than this node.
func dialOne(ctx context.Context, ip net.IP, port int, timeout time.Duration, token string, accept []int, elsewhere bool) (kind, detail string) {
	kind, detail = dialKind(ctx, ip, port, timeout, token, accept)
	if kind != "" && elsewhere && ip.IsLoopback() {
		// Whatever went wrong, the cause to fix is the address: another
		// machine's name resolves to this one.
		return kindLoopback, kind + ": " + detail
	}
	return kind, detail
}

func dialKind(ctx context.Context, ip net.IP, port int, timeout time.Duration, token string, accept []int) (kind, detail string) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	if err != nil {
		return classify(err), errText(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return kindRefused, "connection closed without a greeting (" + errText(err) + ")"
		}
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			// The greeting (or the handshake's last ACK) was lost or late.
			return kindTimeout, "connected, but no greeting within " + timeout.String()
		}
		return kindWrongPeer, "no greeting: " + errText(err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "gotrain-preflight" {
		return kindWrongPeer, "another program answers there"
	}
	if f[1] != token {
		return kindWrongPeer, "another gotrain pre-flight answers there"
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || !slices.Contains(accept, n) {
		return kindWrongPeer, "node " + f[2] + " answers there"
	}
	return "", ""
}

// classify names the cause of a failed dial.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return kindRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return kindNoRoute
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout(), errors.Is(err, syscall.ETIMEDOUT):
		return kindTimeout
	}
	return kindOtherError
}

// errText is err's message without Go's "dial tcp a->b:" framing.
func errText(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err.Error()
		}
		return oe.Err.Error()
	}
	return err.Error()
}
