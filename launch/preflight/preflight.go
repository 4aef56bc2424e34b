// Package preflight checks, before any worker of a multi-node job starts,
// that every host can run it: ssh reaches it, it has this build of gotrain
// and the same program, enough free /dev/shm and memory, and every node
// can dial the rendezvous port and the data-plane ports of every other.
// Each problem is one line naming the host (for connectivity, the pair of
// hosts and the ports) and its cause, with what to do where that helps.
//
// Connectivity is measured, not guessed from one dial: each port is
// probed again after a probe that goes unanswered, with a backoff. A port
// no probe reaches fails the check (a firewall, an address not routed);
// probes lost on the way to ports that answered in the end are a warning
// with the measured rate (Plan.Logger), and the job goes on.
//
// Every host is checked at once, in one ssh session each: the session
// runs `gotrain preflight-node` (Node), which checks its host, opens the
// ports, reports, dials the other nodes when told to, reports again and
// closes its ports when the launcher closes the session.
package preflight

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/launch/bincache"
	"github.com/gotrain/gotrain/launch/ssh"
)

// Runner runs argv on host with stdin as its input and returns its
// standard output; a failure of ssh itself is an *ssh.Error, a remote
// command that fails an *ssh.ExitError (internal/ssh.Client is a
// Runner).
type Runner interface {
	Run(ctx context.Context, host string, stdin io.Reader, argv ...string) ([]byte, error)
}

// Starter is a Runner that can also start a command and talk to it while
// it runs, as ssh.Client does. Check needs one for the connectivity
// matrix, whose ports must stay open while the other nodes dial them;
// with a plain Runner it checks everything else and logs that it could
// not check connectivity.
type Starter interface {
	Runner
	Command(ctx context.Context, host string, argv ...string) *exec.Cmd
}

// Defaults of Plan's zero fields.
const (
	// DefaultMasterPort is the rendezvous port, as torchrun's.
	DefaultMasterPort = 29500
	// DefaultDialTimeout bounds the longest probe of the connectivity
	// check: a working link answers in milliseconds, so the first probe
	// of a port waits at most 500 ms and each next one (after a packet
	// lost on the way) twice as long as the last, up to this.
	DefaultDialTimeout = 1500 * time.Millisecond
	// DefaultTimeout bounds the whole check.
	DefaultTimeout = 30 * time.Second
	// DefaultWorkerMemory is the memory each worker is expected to need:
	// the resident size of the MNIST MLP demo's worker.
	DefaultWorkerMemory = 160 << 20
)

// Host is one machine of the job.
type Host struct {
	// Name is how ssh reaches it (user@host, an alias of ~/.ssh/config).
	Name string
	// Addr is how the other nodes dial it; "" means Name without its
	// user@.
	Addr string
	// Workers is how many workers run there (at least 1).
	Workers int
}

// Plan is what the launcher knows of the job, which Check verifies.
type Plan struct {
	// Hosts are the machines, node 0 first.
	Hosts []Host
	// Gotrain is the gotrain the hosts run, as a command for their shell
	// (a name found in PATH, or a path); "" means "gotrain".
	Gotrain string
	// LocalGotrain is the local gotrain whose build every host must run;
	// "" means this process's executable (the launcher is gotrain).
	LocalGotrain string
	// Program is the workers' program as the hosts run it (a path, or a
	// name found in their PATH); "" means none to check (the job is
	// gotrain itself, as `gotrain train`).
	Program string
	// LocalProgram is the local file the hosts' Program must equal
	// (sha256); "" means Program when it is a path to a local file, else
	// the hosts' program is only checked to exist.
	LocalProgram string
	// Copy places gotrain, and the program when it is a static
	// executable, in each host's cache (package bincache) before checking:
	// then a missing or different gotrain or program there is no error.
	Copy bool
	// MasterPort is the rendezvous port on node 0; 0 means
	// DefaultMasterPort.
	MasterPort int
	// PortMin and PortMax are the data-plane port range (inclusive); both
	// 0 mean $GOTRAIN_PORT_RANGE, else distributed's default range.
	PortMin, PortMax int
	// NoShm means the workers do not use /dev/shm (GOTRAIN_SHM=0), so its
	// free space is not checked.
	NoShm bool
	// WorkerMemory is the memory each worker needs, in bytes; 0 means
	// DefaultWorkerMemory.
	WorkerMemory int64
	// DialTimeout bounds each probe of a port; 0 means
	// DefaultDialTimeout. A port is probed until it answers, up to 5
	// times, within DefaultProbeBudget for all of a node's probes.
	DialTimeout time.Duration
	// Timeout bounds the whole check; 0 means DefaultTimeout.
	Timeout time.Duration
	// Logger receives what Check could not check; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Placement is where a host runs gotrain and the program from: the
// Plan's commands, or their copies in the host's cache.
type Placement struct {
	Gotrain string
	Program string // "" when the Plan has none
}

// Failure is one problem found, as one line.
type Failure struct {
	Host string // the host it concerns (for connectivity, the dialing one); "" for the launching machine
	Peer string // for connectivity, the host dialed; else ""
	Line string // the whole line, naming the host(s) and the cause
	Err  error  // the underlying error, when there is one (an *ssh.Error)
}

// Error is a failed check: every problem found, in the order of the
// hosts.
type Error struct {
	Failures []Failure
}

// Error is one line per failure.
func (e *Error) Error() string {
	lines := make([]string, len(e.Failures))
	for i, f := range e.Failures {
		lines[i] = f.Line
	}
	return strings.Join(lines, "\n")
}

// Unwrap is the failures' underlying errors, so errors.As finds an
// *ssh.Error.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, f := range e.Failures {
		if f.Err != nil {
			errs = append(errs, f.Err)
		}
	}
	return errs
}

// ErrPlan is wrapped by the error of a Plan that cannot describe a job.
var ErrPlan = errors.New("preflight: bad plan")

// Check verifies plan on every host at once and returns nil, or an
// *Error with one line per problem (or an error wrapping ErrPlan). It
// opens no port a worker needs after it returns.
func Check(ctx context.Context, r Runner, plan Plan) error {
	_, err := Prepare(ctx, r, plan)
	return err
}

// withTimeout bounds a check by Plan.Timeout; tests replace it to decide
// when that has passed.
var withTimeout = context.WithTimeout

// Prepare is Check, also returning where each host (in plan's order)
// runs gotrain and the program from: with plan.Copy, the copies it placed
// in the hosts' caches.
func Prepare(ctx context.Context, r Runner, plan Plan) ([]Placement, error) {
	p, err := plan.resolve()
	if err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx, p.Timeout)
	defer cancel()
	c := &checker{plan: p, r: r, token: randomToken()}
	c.run(ctx)
	if len(c.failures) > 0 {
		slices.SortStableFunc(c.failures, func(a, b keyed) int {
			if a.order != b.order {
				return a.order - b.order
			}
			return a.sub - b.sub
		})
		e := &Error{}
		for _, f := range c.failures {
			e.Failures = append(e.Failures, f.Failure)
		}
		return c.places, e
	}
	return c.places, nil
}

// resolve fills in the defaults and checks the plan.
func (p Plan) resolve() (Plan, error) {
	if len(p.Hosts) == 0 {
		return p, fmt.Errorf("%w: no host", ErrPlan)
	}
	p.Hosts = slices.Clone(p.Hosts)
	seen := map[string]bool{}
	for i := range p.Hosts {
		h := &p.Hosts[i]
		if h.Name == "" {
			return p, fmt.Errorf("%w: host %d has no name", ErrPlan, i)
		}
		if seen[h.Name] {
			return p, fmt.Errorf("%w: host %s is listed twice", ErrPlan, h.Name)
		}
		seen[h.Name] = true
		if h.Workers < 1 {
			return p, fmt.Errorf("%w: host %s: %d workers (want at least 1)", ErrPlan, h.Name, h.Workers)
		}
		if h.Addr == "" {
			h.Addr = h.Name[strings.LastIndex(h.Name, "@")+1:]
		}
	}
	if p.Gotrain == "" {
		p.Gotrain = "gotrain"
	}
	if p.LocalProgram == "" && strings.Contains(p.Program, "/") {
		if st, err := os.Stat(p.Program); err == nil && st.Mode().IsRegular() {
			p.LocalProgram = p.Program
		}
	}
	if p.MasterPort == 0 {
		p.MasterPort = DefaultMasterPort
	}
	if p.PortMin == 0 && p.PortMax == 0 {
		p.PortMin, p.PortMax = distributed.DefaultPortMin, distributed.DefaultPortMax
		if s := os.Getenv("GOTRAIN_PORT_RANGE"); s != "" {
			lo, hi, ok := strings.Cut(s, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if !ok || err1 != nil || err2 != nil {
				return p, fmt.Errorf("%w: GOTRAIN_PORT_RANGE=%q, want MIN-MAX", ErrPlan, s)
			}
			p.PortMin, p.PortMax = a, b
		}
	}
	if p.PortMin < 1 || p.PortMax < p.PortMin || p.PortMax > 65535 {
		return p, fmt.Errorf("%w: data-plane port range %d-%d", ErrPlan, p.PortMin, p.PortMax)
	}
	if p.MasterPort < 1 || p.MasterPort > 65535 {
		return p, fmt.Errorf("%w: master port %d", ErrPlan, p.MasterPort)
	}
	if p.WorkerMemory == 0 {
		p.WorkerMemory = DefaultWorkerMemory
	}
	if p.DialTimeout <= 0 {
		p.DialTimeout = DefaultDialTimeout
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	return p, nil
}

// worldSize is the number of workers of the job.
func (p Plan) worldSize() int {
	n := 0
	for _, h := range p.Hosts {
		n += h.Workers
	}
	return n
}

func randomToken() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// keyed is a failure with its place in the report: the host's index, then
// an order within it.
type keyed struct {
	Failure
	order, sub int
}

// checker is one run of Check.
type checker struct {
	plan  Plan
	r     Runner
	token string

	mu       sync.Mutex // guards failures and warnings
	failures []keyed
	warnings []string

	places []Placement
}

// fail records a failure of host i; sub orders it among host i's.
func (c *checker) fail(i, sub int, f Failure) {
	c.mu.Lock()
	c.failures = append(c.failures, keyed{Failure: f, order: i, sub: sub})
	c.mu.Unlock()
}

// failHost records a one-line failure of host i.
func (c *checker) failHost(i, sub int, format string, args ...any) {
	h := c.plan.Hosts[i].Name
	c.fail(i, sub, Failure{Host: h, Line: "host " + h + ": " + fmt.Sprintf(format, args...)})
}

// failLocal records a problem on the launching machine, first.
func (c *checker) failLocal(format string, args ...any) {
	c.fail(-1, 0, Failure{Line: "preflight: " + fmt.Sprintf(format, args...)})
}

// failErr records err (which names the host) as host i's failure.
func (c *checker) failErr(i int, err error) {
	var se *ssh.Error
	if errors.As(err, &se) {
		c.fail(i, 0, Failure{Host: c.plan.Hosts[i].Name, Line: se.Error(), Err: se})
		return
	}
	c.fail(i, 0, Failure{Host: c.plan.Hosts[i].Name, Line: oneLine(err.Error()), Err: err})
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// run checks every host, recording failures.
func (c *checker) run(ctx context.Context) {
	p := c.plan
	n := len(p.Hosts)
	c.places = make([]Placement, n)
	for i := range c.places {
		c.places[i] = Placement{Gotrain: p.Gotrain, Program: p.Program}
	}
	want, wantErr := c.localBuild()
	if wantErr != nil {
		c.failLocal("cannot hash the local gotrain to compare builds: %v", wantErr)
		return
	}
	var wantProgram string
	var local *bincache.File
	if p.LocalProgram != "" {
		f, err := bincache.Stat(p.LocalProgram)
		if err != nil {
			c.failLocal("cannot hash the local program to compare: %v", err)
			return
		}
		wantProgram, local = f.SHA256, &f
	}

	alive := make([]bool, n)
	for i := range alive {
		alive[i] = true
	}
	// With a session that stays open, --copy first runs the gotrain
	// already in each host's cache, whose own hash (it reports its build)
	// proves it intact: a warm host then costs one session, and only a
	// host without it pays for the copy.
	st, streaming := c.r.(Starter)
	var cached *bincache.File
	if p.Copy && streaming {
		gotrain, program, ok := c.copyFiles(want, local)
		if !ok {
			return
		}
		cached = &gotrain
		if program != nil && !c.placeAll(ctx, nil, program, alive) {
			return
		}
	} else if p.Copy && !c.place(ctx, want, local, alive) {
		return
	}

	sessions := make([]*session, n)
	probes := make([]*probe, n)
	var wg sync.WaitGroup
	for i, h := range p.Hosts {
		if !alive[i] {
			continue
		}
		req := request{
			Token: c.token, Node: i, Workers: h.Workers, WorldSize: p.worldSize(),
			WorkerMemory: p.WorkerMemory, Shm: !p.NoShm, Program: c.places[i].Program,
			PortMin: p.PortMin, PortMax: p.PortMax,
		}
		if i == 0 {
			req.MasterPort = p.MasterPort
		}
		wg.Go(func() {
			var err error
			switch {
			case cached != nil:
				sessions[i], probes[i], err = c.startCached(ctx, st, i, *cached, req)
			case streaming:
				sessions[i], probes[i], err = startSession(ctx, st, h.Name, []string{c.places[i].Gotrain, NodeCommand}, req)
			default:
				probes[i], err = runProbe(ctx, c.r, h.Name, c.places[i].Gotrain, req)
			}
			if err != nil {
				c.failNode(i, err)
			}
		})
	}
	wg.Wait()
	defer func() {
		// Every node closes its ports before Check returns, so the workers
		// find them free.
		var wg sync.WaitGroup
		for _, s := range sessions {
			if s != nil {
				wg.Go(s.close)
			}
		}
		wg.Wait()
	}()
	for i, pr := range probes {
		if pr != nil {
			c.judge(i, pr, want, wantProgram)
		}
	}
	if !streaming {
		if slices.IndexFunc(probes, func(p *probe) bool { return p != nil }) < 0 {
			return // nothing to connect
		}
		p.Logger.Warn("preflight: the runner cannot keep a session open, so the connectivity between the nodes was not checked")
		return
	}
	c.connectivity(ctx, sessions, probes)
}

// localBuild is the build every host must run.
func (c *checker) localBuild() (distributed.Build, error) {
	if c.plan.LocalGotrain == "" {
		return distributed.LocalBuild()
	}
	f, err := bincache.Stat(c.plan.LocalGotrain)
	return distributed.Build{SHA256: f.SHA256}, err
}

// startCached starts host i's node from the gotrain in its cache and
// returns its session when that is gotrain's intact copy; otherwise (none
// there, a different or damaged file) it copies gotrain there with
// bincache and starts the node from the copy.
func (c *checker) startCached(ctx context.Context, st Starter, i int, gotrain bincache.File, req request) (*session, *probe, error) {
	host := c.plan.Hosts[i].Name
	// The host's shell finds its home; the node reports where that is.
	argv := []string{"sh", "-c", `exec "$HOME/` + bincache.Dir + `/$1/$2" ` + NodeCommand, "gotrain-cached", gotrain.SHA256, gotrain.Name}
	s, pr, err := startSession(ctx, st, host, argv, req)
	if err == nil && pr.BuildErr == "" && pr.Build.SHA256 == gotrain.SHA256 && filepath.IsAbs(pr.Executable) {
		c.places[i].Gotrain = pr.Executable
		return s, pr, nil
	}
	if s != nil {
		s.close()
	}
	var se *ssh.Error
	if errors.As(err, &se) || ctx.Err() != nil {
		return nil, nil, err // the host cannot be reached: a copy would not be either
	}
	if s, pr, ok := c.startStaged(ctx, st, i, gotrain, req); ok {
		return s, pr, nil
	}
	// The node from the staged copy did not prove it: bincache's own
	// check decides, and names what is wrong.
	path, err := bincache.Place(ctx, c.r, host, gotrain)
	if err != nil {
		return nil, nil, err
	}
	c.places[i].Gotrain = path
	return startSession(ctx, st, host, []string{path, NodeCommand}, req)
}

// startStaged streams gotrain to host i's cache and starts the node from
// the new file, which hashes itself as it starts (in Go, much faster than
// the host's sha256sum would); a node that reports gotrain's hash gives
// the copy its final name. It reports false, having removed the file,
// when the node did not start or reported another hash.
func (c *checker) startStaged(ctx context.Context, st Starter, i int, gotrain bincache.File, req request) (*session, *probe, bool) {
	host := c.plan.Hosts[i].Name
	staged, err := bincache.Stage(ctx, c.r, host, gotrain)
	if err != nil {
		return nil, nil, false
	}
	s, pr, err := startSession(ctx, st, host, []string{staged, NodeCommand}, req)
	if err == nil && pr.BuildErr == "" && pr.Build.SHA256 == gotrain.SHA256 {
		if final, err := bincache.Commit(ctx, c.r, host, gotrain, staged); err == nil {
			c.places[i].Gotrain = final
			return s, pr, true
		}
	}
	if s != nil {
		s.close()
	}
	_ = bincache.Discard(ctx, c.r, host, staged)
	return nil, nil, false
}

// place copies gotrain (whose build is want) and the program (local,
// when it is a static executable) to every host; hosts it fails on are no
// longer alive. It reports whether any host is left.
func (c *checker) place(ctx context.Context, want distributed.Build, local *bincache.File, alive []bool) bool {
	gotrain, program, ok := c.copyFiles(want, local)
	if !ok {
		return false
	}
	return c.placeAll(ctx, &gotrain, program, alive)
}

// copyFiles are the local files --copy carries: gotrain (whose build is
// want) and the program (local) when it is a static executable. It
// records a failure and reports false when they cannot be read.
func (c *checker) copyFiles(want distributed.Build, local *bincache.File) (gotrain bincache.File, program *bincache.File, ok bool) {
	p := c.plan
	if p.LocalGotrain == "" {
		// This executable, hashed already for its build identity.
		exe, err := os.Executable()
		if err != nil {
			c.failLocal("--copy: cannot find the local gotrain: %v", err)
			return gotrain, nil, false
		}
		gotrain = bincache.File{Path: exe, Name: filepath.Base(exe), SHA256: want.SHA256}
	} else {
		var err error
		if gotrain, err = bincache.Stat(p.LocalGotrain); err != nil {
			c.failLocal("--copy: %v", err)
			return gotrain, nil, false
		}
	}
	if local != nil {
		static, err := bincache.Static(local.Path)
		if err != nil {
			c.failLocal("--copy: %v", err)
			return gotrain, nil, false
		}
		if static {
			program = local
		}
	}
	return gotrain, program, true
}

// placeAll copies gotrain (unless nil) and program (unless nil) to every
// alive host; hosts it fails on are no longer alive. It reports whether
// any host is left.
func (c *checker) placeAll(ctx context.Context, gotrain, program *bincache.File, alive []bool) bool {
	var wg sync.WaitGroup
	for i, h := range c.plan.Hosts {
		if !alive[i] {
			continue
		}
		// gotrain and the program at once: each costs a session or two.
		var gerr, perr error
		var hw sync.WaitGroup
		if gotrain != nil {
			hw.Go(func() { c.places[i].Gotrain, gerr = bincache.Place(ctx, c.r, h.Name, *gotrain) })
		}
		if program != nil {
			hw.Go(func() { c.places[i].Program, perr = bincache.Place(ctx, c.r, h.Name, *program) })
		}
		wg.Go(func() {
			hw.Wait()
			for _, err := range []error{gerr, perr} {
				if err != nil {
					c.failErr(i, err)
					alive[i] = false
					return // one line: the second is the same failure
				}
			}
		})
	}
	wg.Wait()
	return slices.Contains(alive, true)
}

// failNode records why host i's session gave no probe.
func (c *checker) failNode(i int, err error) {
	var ee *ssh.ExitError
	gotrain := c.places[i].Gotrain
	switch {
	case errors.As(err, &ee) && c.plan.Copy && (ee.Code == 127 || ee.Code == 126):
		// The copy is there and verified: it is the loader or a library
		// that is missing.
		c.failHost(i, 0, "the copy of gotrain (%s) does not start there (%s): build gotrain with CGO_ENABLED=0, so that it needs nothing from the host", gotrain, exitText(ee))
	case errors.As(err, &ee) && (ee.Code == 127 || ee.Code == 126):
		what := "not found"
		if ee.Code == 126 {
			what = "not executable"
		}
		if ee.Code == 126 && ee.Stderr != "" {
			what += ": " + ee.Stderr // an exec format error says it is for another machine
		}
		c.failHost(i, 0, "gotrain %s (%s): install this build there (or give its path), or use --copy", what, gotrain)
	case errors.As(err, &ee) && crashLine(ee.Stderr) != "":
		c.failHost(i, 0, "%s %s crashed (%s)", gotrain, NodeCommand, exitText(ee))
	case errors.As(err, &ee):
		c.failHost(i, 0, "%s %s failed (%s): a different gotrain build there? install this one, or use --copy", gotrain, NodeCommand, exitText(ee))
	default:
		c.failErr(i, err)
	}
}

func exitText(ee *ssh.ExitError) string {
	if ee.Stderr != "" {
		return fmt.Sprintf("exit status %d: %s", ee.Code, ee.Stderr)
	}
	return fmt.Sprintf("exit status %d", ee.Code)
}

// gotrainName names the gotrain host i runs, for a message.
func (c *checker) gotrainName(i int) string {
	if g := c.places[i].Gotrain; g != "gotrain" {
		return "gotrain at " + g
	}
	return "gotrain"
}

// judge records what host i's probe shows wrong.
func (c *checker) judge(i int, pr *probe, want distributed.Build, wantProgram string) {
	p := c.plan
	h := p.Hosts[i]
	switch {
	case pr.BuildErr != "":
		c.failHost(i, 1, "%s cannot hash itself to prove its build: %s", c.gotrainName(i), pr.BuildErr)
	case want.Version == "" && pr.Build.SHA256 != want.SHA256,
		want.Version != "" && !pr.Build.SameBuild(want):
		c.failHost(i, 1, "%s is a different build: %s there, %s here (sha256 %s there, %s here): install this build there, or use --copy",
			c.gotrainName(i), pr.Build, want, pr.Build.SHA256, want.SHA256)
	}
	prog := c.places[i].Program
	switch {
	case prog == "":
	case pr.ProgramMissing:
		hint := "copy it there"
		if p.Copy {
			hint = "copy it there (--copy carries only a static executable)"
		} else if p.LocalProgram != "" {
			hint = "copy it there, or use --copy if it is a static executable"
		}
		c.failHost(i, 2, "program %s not found: %s", prog, hint)
	case pr.ProgramErr != "":
		c.failHost(i, 2, "program %s: %s", prog, pr.ProgramErr)
	case wantProgram != "" && pr.ProgramSHA256 != wantProgram:
		c.failHost(i, 2, "program %s is a different build: sha256 %s there, %s here: deploy the same file, or use --copy if it is a static executable",
			pr.ProgramPath, pr.ProgramSHA256, wantProgram)
	}
	if pr.ShmErr == "" && pr.ShmNeed > pr.ShmFree {
		c.failHost(i, 3, "/dev/shm has %s free but %d workers need %s: give it more (docker run --shm-size=%s), run fewer workers there, or set GOTRAIN_SHM=0 to use TCP only",
			sizeString(pr.ShmFree), h.Workers, sizeString(pr.ShmNeed), dockerSize(pr.ShmNeed))
	}
	if need := int64(h.Workers)*p.WorkerMemory + pr.ShmNeed; pr.MemErr == "" && pr.MemAvailable < need {
		c.failHost(i, 4, "not enough memory: %d workers need about %s, %s is available: run fewer workers there (%s:N)",
			h.Workers, sizeString(need), sizeString(pr.MemAvailable), h.Name)
	}
	if pr.MasterErr != "" {
		c.failHost(i, 5, "cannot listen on the rendezvous port %d: %s: another program holds it; stop it or choose another --master-port", p.MasterPort, pr.MasterErr)
	}
}

// sizeString shows n bytes in MiB, or GiB from 1 GiB on.
func sizeString(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", (n+1<<20-1)>>20)
}

// dockerSize is a --shm-size that holds n bytes with a quarter to spare.
func dockerSize(n int64) string {
	n += n / 4
	if n < 1<<30 {
		return fmt.Sprintf("%dm", (n+256<<20-1)/(256<<20)*256)
	}
	return fmt.Sprintf("%dg", (n+1<<30-1)>>30)
}

// connectivity has every node dial every other node's ports, and checks
// that every machine has a data-plane port free for each of its workers.
func (c *checker) connectivity(ctx context.Context, sessions []*session, probes []*probe) {
	p := c.plan
	n := len(p.Hosts)
	// Nodes on one machine share its ports: each may answer for the others.
	machine := map[string][]int{}
	for j, pr := range probes {
		if pr != nil {
			machine[pr.Machine] = append(machine[pr.Machine], j)
		}
	}
	held := map[string][]int{}
	for m, nodes := range machine {
		var ports []int
		workers := 0
		for _, j := range nodes {
			ports = append(ports, probes[j].Held...)
			workers += p.Hosts[j].Workers
		}
		slices.Sort(ports)
		held[m] = slices.Compact(ports)
		if len(held[m]) < workers {
			j := nodes[0]
			c.failHost(j, 6, "%d of the data-plane ports %d-%d are free there but %d workers need one each: free them, or set GOTRAIN_PORT_RANGE to a larger or other range",
				len(held[m]), p.PortMin, p.PortMax, workers)
		}
	}
	var wg sync.WaitGroup
	for i, s := range sessions {
		if s == nil {
			continue
		}
		dr := dialRequest{TimeoutMS: int(p.DialTimeout / time.Millisecond)}
		for j := range n {
			if j == i || probes[j] == nil {
				continue
			}
			t := target{Node: j, Addr: p.Hosts[j].Addr, Accept: machine[probes[j].Machine]}
			if j == 0 && probes[0].MasterErr == "" {
				t.Ports = append(t.Ports, p.MasterPort)
			}
			t.Ports = append(t.Ports, held[probes[j].Machine]...)
			dr.Targets = append(dr.Targets, t)
		}
		if len(dr.Targets) == 0 {
			continue
		}
		wg.Go(func() {
			var rep dialReport
			if err := s.exchange(ctx, dr, &rep); err != nil {
				c.failNode(i, err)
				return
			}
			c.judgeDials(i, rep)
		})
	}
	wg.Wait()
}

// judgeDials records node i's failed dials: one line per peer and kind
// of failure, its ports as ranges.
func (c *checker) judgeDials(i int, rep dialReport) {
	p := c.plan
	type group struct {
		to   int
		kind string
		ip   string
	}
	byGroup := map[group][]dialFailure{}
	var order []group
	for _, f := range rep.Failures {
		g := group{f.Node, f.Kind, f.IP}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], f)
	}
	from := p.Hosts[i].Name
	for k, g := range order {
		fs := byGroup[g]
		to := p.Hosts[g.to]
		where := fmt.Sprintf("host %s → host %s (%s", from, to.Name, to.Addr)
		if g.ip != "" && g.ip != to.Addr {
			where += " = " + g.ip
		}
		where += ")"
		var master bool
		var ports []int
		for _, f := range fs {
			if g.to == 0 && f.Port == p.MasterPort {
				master = true
			} else if f.Port != 0 {
				ports = append(ports, f.Port)
			}
		}
		which := portsText(master, p.MasterPort, ports)
		open := openHint(master, p.MasterPort, ports, p, to.Name[strings.LastIndex(to.Name, "@")+1:])
		dialed := to.Addr
		if g.ip != "" {
			dialed = g.ip
		}
		tries := probesText(fs)
		var line string
		switch g.kind {
		case kindResolve:
			line = fmt.Sprintf("%s: %s does not resolve on %s (%s): list it by an address, or fix its name there", where, to.Addr, from, fs[0].Detail)
		case kindLoopback:
			line = fmt.Sprintf("%s: %s resolves to %s on %s, a loopback address (an /etc/hosts line there?), so %s dials itself, not %s (%s): list %s by an address the other nodes reach",
				where, to.Addr, g.ip, from, from, to.Name, fs[0].Detail, to.Name)
		case kindRefused:
			line = fmt.Sprintf("%s: %s refused (%s; %s: nothing listens there, or a firewall rejects it): %s", where, which, fs[0].Detail, tries, open)
		case kindTimeout:
			line = fmt.Sprintf("%s: %s timed out: %s (a firewall drops them, or %s is not routed from %s): %s", where, which, tries, dialed, from, open)
		case kindNoRoute:
			line = fmt.Sprintf("%s: %s: no route (%s; %s): is %s the address of %s that %s reaches?", where, which, fs[0].Detail, tries, dialed, to.Name, from)
		case kindWrongPeer:
			line = fmt.Sprintf("%s: %s: %s, not %s's pre-flight: is %s the address of %s?", where, which, fs[0].Detail, to.Name, to.Addr, to.Name)
		default:
			line = fmt.Sprintf("%s: %s: %s (%s)", where, which, fs[0].Detail, tries)
		}
		c.fail(i, 10+k, Failure{Host: from, Peer: to.Name, Line: line})
	}
	for _, l := range rep.Links {
		if l.Lost == 0 || slices.ContainsFunc(order, func(g group) bool { return g.to == l.Node }) {
			continue // no loss, or the failure lines say it
		}
		to := p.Hosts[l.Node]
		var master bool
		var ports []int
		for _, port := range l.LostPorts {
			if l.Node == 0 && port == p.MasterPort {
				master = true
			} else {
				ports = append(ports, port)
			}
		}
		which := portsText(master, p.MasterPort, ports)
		if len(ports) > maxListedPorts {
			// The rate is the news; a long list of ports is noise.
			which = strings.TrimPrefix(portsText(master, p.MasterPort, nil)+" and ", " and ") + strconv.Itoa(len(ports)) + " data-plane ports"
		}
		c.warn(fmt.Sprintf("preflight: host %s → host %s (%s): %d of %d probes lost (%s) on %s, each port answered when probed again: the link drops packets; the job goes on, slower while the loss lasts",
			from, to.Name, to.Addr, l.Lost, l.Probes, percent(l.Lost, l.Probes), which))
	}
}

// maxListedPorts bounds the data-plane ports a loss warning lists.
const maxListedPorts = 8

// probesText says how the probes to a failed group of ports went.
func probesText(fs []dialFailure) string {
	probes, took, deadline := 0, 0, false
	for _, f := range fs {
		probes = max(probes, f.Probes)
		took = max(took, f.TookMS)
		deadline = deadline || f.Deadline
	}
	if probes == 0 {
		return "not probed"
	}
	each := " to each port"
	if len(fs) == 1 {
		each = ""
	}
	s := fmt.Sprintf("all %d probes%s failed within %v", probes, each, (time.Duration(took) * time.Millisecond).Round(100*time.Millisecond))
	if deadline {
		s += ", when the probe budget ended"
	}
	return s
}

// percent is n of total as a percentage, "2.5%".
func percent(n, total int) string {
	if total == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 1, 64) + "%"
}

// warn records a warning line and logs it: a problem the job runs with.
func (c *checker) warn(line string) {
	c.mu.Lock()
	c.warnings = append(c.warnings, line)
	c.mu.Unlock()
	c.plan.Logger.Warn(line)
}

// portsText names the ports of a failure: the rendezvous port and the
// data-plane ports as ranges.
func portsText(master bool, masterPort int, ports []int) string {
	var parts []string
	if master {
		parts = append(parts, fmt.Sprintf("rendezvous port %d", masterPort))
	}
	if len(ports) == 1 {
		parts = append(parts, "data-plane port "+ranges(ports))
	} else if len(ports) > 1 {
		parts = append(parts, "data-plane ports "+ranges(ports))
	}
	return strings.Join(parts, " and ")
}

// openHint says which ports to open on host, or what else to do.
func openHint(master bool, masterPort int, ports []int, p Plan, host string) string {
	var hints []string
	if master {
		hints = append(hints, fmt.Sprintf("open TCP port %d on %s, or choose another --master-port", masterPort, host))
	}
	if len(ports) > 0 {
		hints = append(hints, fmt.Sprintf("open TCP ports %d-%d on %s, or set GOTRAIN_PORT_RANGE to a range that is open", p.PortMin, p.PortMax, host))
	}
	return strings.Join(hints, "; ")
}

// ranges writes sorted ports as "a-b,c".
func ranges(ports []int) string {
	var parts []string
	for k := 0; k < len(ports); {
		e := k
		for e+1 < len(ports) && ports[e+1] == ports[e]+1 {
			e++
		}
		if e == k {
			parts = append(parts, strconv.Itoa(ports[k]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ports[k], ports[e]))
		}
		k = e + 1
	}
	return strings.Join(parts, ",")
}

// runProbe runs a node with a plain Runner: the request, then the end of
// input, so it probes, reports and exits.
func runProbe(ctx context.Context, r Runner, host, gotrain string, req request) (*probe, error) {
	b, _ := json.Marshal(req)
	out, err := r.Run(ctx, host, bytes.NewReader(append(b, '\n')), gotrain, NodeCommand)
	if err != nil {
		return nil, err
	}
	var pr probe
	for _, line := range bytes.SplitAfter(out, []byte("\n")) {
		if isAnswer(line) {
			if err := json.Unmarshal(line, &pr); err != nil {
				return nil, fmt.Errorf("host %s: %s %s answered %q: %w", host, gotrain, NodeCommand, firstLine(line), err)
			}
			return &pr, nil
		}
	}
	return nil, fmt.Errorf("host %s: %s %s gave no answer (its output: %q)", host, gotrain, NodeCommand, firstLine(out))
}

// isAnswer tells the node's JSON lines from what a host's shell start-up
// files may print on stdout before it runs.
func isAnswer(line []byte) bool { return bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) }

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// session is one host's running `gotrain preflight-node`.
type session struct {
	host   string
	what   string // the command, for messages
	cmd    *exec.Cmd
	other  lockedBuffer // the first bytes it wrote on stdout that are not an answer
	stdin  io.WriteCloser
	lines  chan []byte   // its stdout, a line at a time; closed at its end
	done   chan struct{} // closed when it has exited and waitErr is set
	stderr lockedBuffer

	waitErr error
}

// startSession starts the node (argv) on host, sends req and waits for its
// probe.
func startSession(ctx context.Context, st Starter, host string, argv []string, req request) (*session, *probe, error) {
	cmd := st.Command(ctx, host, argv...)
	what := argv[0] + " " + NodeCommand
	if argv[0] == "sh" {
		what = "the cached gotrain's " + NodeCommand
	}
	s := &session{host: host, what: what, cmd: cmd, lines: make(chan []byte, 4), done: make(chan struct{})}
	cmd.Stderr = &s.stderr
	cmd.WaitDelay = 2 * time.Second
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, nil, fmt.Errorf("host %s: %w", host, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("host %s: %w", host, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("host %s: start %s: %w", host, cmd.Path, err)
	}
	go func() {
		rd := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := rd.ReadBytes('\n')
			if isAnswer(line) {
				s.lines <- line
			} else if s.other.Len() < maxOther {
				s.other.Write(line[:min(len(line), maxOther-s.other.Len())])
			}
			if err != nil {
				break
			}
		}
		close(s.lines)
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	var pr probe
	if err := s.exchange(ctx, req, &pr); err != nil {
		s.close()
		return nil, nil, err
	}
	return s, &pr, nil
}

// exchange sends v and reads the answer into into.
func (s *session) exchange(ctx context.Context, v, into any) error {
	b, _ := json.Marshal(v)
	if _, err := s.stdin.Write(append(b, '\n')); err != nil {
		// It has gone: its exit status says why.
		return s.ended(ctx)
	}
	select {
	case line, ok := <-s.lines:
		if !ok {
			return s.ended(ctx)
		}
		if err := json.Unmarshal(line, into); err != nil {
			return fmt.Errorf("host %s: %s answered %q: %w", s.host, NodeCommand, firstLine(line), err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("host %s: no answer from %s: %w", s.host, NodeCommand, ctx.Err())
	}
}

// maxOther bounds what a session keeps of output that is not an answer.
const maxOther = 200

// ended is the error of a session that stopped answering: why it ended
// (its exit status, the line of its stderr that says why, a crash) and
// what it wrote instead of an answer, which tells a program that is not
// gotrain from a gotrain that failed.
func (s *session) ended(ctx context.Context) error {
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("host %s: no answer from %s: %w", s.host, NodeCommand, ctx.Err())
	}
	if ctx.Err() != nil && s.waitErr != nil {
		return fmt.Errorf("host %s: %w", s.host, ctx.Err())
	}
	wrote := "it wrote nothing on stdout"
	if o := s.other.String(); o != "" {
		wrote = fmt.Sprintf("it wrote %q instead of an answer", o)
	}
	if s.waitErr == nil {
		return fmt.Errorf("host %s: %s exited with status 0 without answering (%s): is it gotrain, and this build of it? install this build there, or use --copy", s.host, s.what, wrote)
	}
	err := ssh.Classify(s.host, s.waitErr, s.stderr.String())
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		if why := crashLine(s.stderr.String()); why != "" {
			ee.Stderr = why
		}
		if ee.Code != 126 && ee.Code != 127 {
			ee.Stderr = strings.TrimPrefix(ee.Stderr+"; ", "; ") + wrote
		}
	}
	return err
}

// crashLine is the line of stderr that says why a program ended, when
// it crashed or could not start: a Go panic or fatal error, a signal, a
// file the system cannot run; "" if there is none.
func crashLine(stderr string) string {
	for l := range strings.Lines(stderr) {
		t := strings.TrimSpace(l)
		for _, m := range []string{"panic:", "fatal error:", "SIGSEGV", "SIGILL", "SIGBUS", "xec format error", "cannot execute binary file", "Killed", "Segmentation fault"} {
			if strings.Contains(t, m) {
				return oneLine(t)
			}
		}
	}
	return ""
}

// close ends the session (its end of input tells the node to close its
// ports and exit) and waits for it, killing it after a grace period.
func (s *session) close() {
	s.stdin.Close()
	go func() {
		for range s.lines { // drain, so the reader reaches Wait
		}
	}()
	select {
	case <-s.done:
	case <-time.After(3 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// lockedBuffer is a bytes.Buffer safe for the command's stderr copier
// and a reader.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Len is how many bytes it holds.
func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
